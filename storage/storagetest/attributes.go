package storagetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testAttributes(t *testing.T, open func(t *testing.T) storage.Backend) {
	get := func(t *testing.T, b storage.Backend, id uuid.UUID, scope storage.Scope, keys []string, want ...kv.Entry) {
		t.Helper()
		got, err := b.GetAttributes(t.Context(), id, scope, keys)
		must(t, err)
		checkEntries(t, scope.String(), got, want)
	}

	t.Run("SaveGet", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		must(t, b.SaveAttributes(t.Context(), id, storage.SharedScope, []kv.Entry{
			str(300, "z", "last"), long(100, "a", 1),
			{Ts: 200, Key: "cfg", Value: kv.JSONValue(`{"mode":"eco"}`)},
			{Ts: 250, Key: "on", Value: kv.BoolValue(true)},
		}))
		get(t, b, id, storage.SharedScope, nil,
			long(100, "a", 1), kv.Entry{Ts: 200, Key: "cfg", Value: kv.JSONValue(`{"mode":"eco"}`)},
			kv.Entry{Ts: 250, Key: "on", Value: kv.BoolValue(true)}, str(300, "z", "last"))
		get(t, b, id, storage.SharedScope, []string{"z", "missing", "a"}, long(100, "a", 1), str(300, "z", "last"))
		get(t, b, id, storage.SharedScope, []string{"missing"})
		get(t, b, id, storage.ServerScope, nil)
	})

	t.Run("SaveOfMany", func(t *testing.T) {
		b := open(t)
		a, c := uuid.New(), uuid.New()
		must(t, b.SaveAttributes(t.Context(), a, storage.ServerScope, []kv.Entry{long(1, "kept", 1)}))
		must(t, b.SaveAttributesOf(t.Context(), storage.ServerScope, []storage.EntityAttributes{
			{EntityID: a, Attrs: []kv.Entry{long(100, "lastActivityTime", 100)}},
			{EntityID: c, Attrs: []kv.Entry{long(200, "lastActivityTime", 200), str(200, "s", "x")}},
			{EntityID: uuid.New()},
		}))
		get(t, b, a, storage.ServerScope, nil, long(1, "kept", 1), long(100, "lastActivityTime", 100))
		get(t, b, c, storage.ServerScope, nil, long(200, "lastActivityTime", 200), str(200, "s", "x"))
		get(t, b, c, storage.SharedScope, nil)
		must(t, b.SaveAttributesOf(t.Context(), storage.ServerScope, nil))
	})

	t.Run("Replace", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{long(100, "a", 1), long(100, "b", 1)}))
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{double(200, "a", 2.5)}))
		get(t, b, id, storage.ServerScope, nil, double(200, "a", 2.5), long(100, "b", 1))
		// Unlike telemetry latest values, a save always replaces, whatever its ts.
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{str(50, "a", "older")}))
		get(t, b, id, storage.ServerScope, []string{"a"}, str(50, "a", "older"))
	})

	t.Run("ScopesAreIndependent", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		must(t, b.SaveAttributes(t.Context(), id, storage.ClientScope, []kv.Entry{long(1, "k", 1)}))
		must(t, b.SaveAttributes(t.Context(), id, storage.SharedScope, []kv.Entry{long(2, "k", 2)}))
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{long(3, "k", 3)}))
		get(t, b, id, storage.ClientScope, nil, long(1, "k", 1))
		get(t, b, id, storage.SharedScope, nil, long(2, "k", 2))
		get(t, b, id, storage.ServerScope, nil, long(3, "k", 3))
		deleted, err := b.DeleteAttributes(t.Context(), id, storage.SharedScope, []string{"k"})
		must(t, err)
		checkStrings(t, "deleted", deleted, []string{"k"})
		get(t, b, id, storage.ClientScope, nil, long(1, "k", 1))
		get(t, b, id, storage.SharedScope, nil)
		get(t, b, id, storage.ServerScope, nil, long(3, "k", 3))
	})

	t.Run("Delete", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{long(1, "a", 1), long(1, "m", 1), long(1, "z", 1)}))
		deleted, err := b.DeleteAttributes(t.Context(), id, storage.ServerScope, []string{"z", "missing", "a"})
		must(t, err)
		checkStrings(t, "deleted", deleted, []string{"a", "z"})
		get(t, b, id, storage.ServerScope, nil, long(1, "m", 1))
		deleted, err = b.DeleteAttributes(t.Context(), id, storage.ServerScope, []string{"a"})
		must(t, err)
		checkStrings(t, "deleted again", deleted, nil)
	})

	t.Run("EntityIsolation", func(t *testing.T) {
		b := open(t)
		a := uuid.MustParse("22222222-2222-4222-8222-222222222220")
		c := uuid.MustParse("22222222-2222-4222-8222-222222222221")
		for _, scope := range []storage.Scope{storage.ClientScope, storage.SharedScope, storage.ServerScope} {
			must(t, b.SaveAttributes(t.Context(), a, scope, []kv.Entry{long(1, "k", 1)}))
			must(t, b.SaveAttributes(t.Context(), c, scope, []kv.Entry{long(2, "k", 2)}))
		}
		write(t, b, a, long(1, "series", 1))
		must(t, b.DeleteEntityAttributes(t.Context(), a))
		for _, scope := range []storage.Scope{storage.ClientScope, storage.SharedScope, storage.ServerScope} {
			get(t, b, a, scope, nil)
			get(t, b, c, scope, nil, long(2, "k", 2))
		}
		got, err := b.Latest(t.Context(), a, nil)
		must(t, err)
		checkEntries(t, "telemetry survives", got, []kv.Entry{long(1, "series", 1)})
	})
}
