package storagetest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

func checkRecord(t *testing.T, what string, got, want storage.Record) {
	t.Helper()
	if got.Kind != want.Kind || got.ID != want.ID || got.Owner != want.Owner ||
		!bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Unique, want.Unique) {
		t.Fatalf("%s:\ngot  %+v\nwant %+v", what, got, want)
	}
}

func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func testEntities(t *testing.T, open func(t *testing.T) storage.Backend) {
	owner := uuid.New()
	device := func(name string) storage.Record {
		return storage.Record{
			Kind:   "device",
			ID:     uuid.New(),
			Owner:  owner,
			Data:   []byte(`{"name":"` + name + `"}`),
			Unique: []string{"name:" + owner.String() + "/" + name, "token:" + name},
		}
	}

	t.Run("PutGetLookup", func(t *testing.T) {
		b := open(t)
		r := device("d1")
		must(t, b.Put(t.Context(), r))
		got, err := b.Get(t.Context(), "device", r.ID)
		must(t, err)
		checkRecord(t, "Get", got, r)
		for _, u := range r.Unique {
			got, err := b.Lookup(t.Context(), "device", u)
			must(t, err)
			checkRecord(t, "Lookup "+u, got, r)
		}
		_, err = b.Get(t.Context(), "device", uuid.New())
		checkErr(t, "Get missing id", err, storage.ErrNotFound)
		_, err = b.Get(t.Context(), "asset", r.ID)
		checkErr(t, "Get other kind", err, storage.ErrNotFound)
		_, err = b.Lookup(t.Context(), "device", "token:missing")
		checkErr(t, "Lookup missing", err, storage.ErrNotFound)
		noSecret(t, "Lookup missing", err, "token:missing")
		_, err = b.Lookup(t.Context(), "asset", "token:d1")
		checkErr(t, "Lookup other kind", err, storage.ErrNotFound)
	})

	t.Run("NoUnique", func(t *testing.T) {
		b := open(t)
		r := storage.Record{Kind: "tenant", ID: uuid.New(), Data: []byte("t")}
		must(t, b.Put(t.Context(), r))
		got, err := b.Get(t.Context(), "tenant", r.ID)
		must(t, err)
		checkRecord(t, "Get", got, r)
		list, err := b.List(t.Context(), "tenant", uuid.Nil)
		must(t, err)
		if len(list) != 1 {
			t.Fatalf("List of system records: got %d, want 1", len(list))
		}
		checkRecord(t, "List", list[0], r)
	})

	t.Run("UpdateReleasesOldValues", func(t *testing.T) {
		b := open(t)
		r := device("old")
		must(t, b.Put(t.Context(), r))
		oldUnique := r.Unique
		r.Data = []byte("v2")
		r.Unique = []string{oldUnique[1], "name:new"}
		must(t, b.Put(t.Context(), r))
		got, err := b.Get(t.Context(), "device", r.ID)
		must(t, err)
		checkRecord(t, "Get after update", got, r)
		_, err = b.Lookup(t.Context(), "device", oldUnique[0])
		checkErr(t, "Lookup released value", err, storage.ErrNotFound)
		got, err = b.Lookup(t.Context(), "device", "name:new")
		must(t, err)
		checkRecord(t, "Lookup new value", got, r)
		// The released value is free for another record.
		other := device("other")
		other.Unique = []string{oldUnique[0]}
		must(t, b.Put(t.Context(), other))
	})

	t.Run("Replace", func(t *testing.T) {
		b := open(t)
		r := device("rep")
		checkErr(t, "Replace before Put", b.Replace(t.Context(), r, r.Data), storage.ErrNotFound)
		must(t, b.Put(t.Context(), r))
		read := r.Data
		// A write between the read and the replace: the replace changes nothing.
		other := r
		other.Data = []byte("edited elsewhere")
		must(t, b.Put(t.Context(), other))
		next := r
		next.Data, next.Unique = []byte("v2"), []string{"token:rep2"}
		checkErr(t, "Replace after a change", b.Replace(t.Context(), next, read), storage.ErrChanged)
		got, err := b.Get(t.Context(), "device", r.ID)
		must(t, err)
		checkRecord(t, "after a refused Replace", got, other)
		// Against what is stored now it goes through, unique values and all.
		must(t, b.Replace(t.Context(), next, other.Data))
		got, err = b.Get(t.Context(), "device", r.ID)
		must(t, err)
		checkRecord(t, "after Replace", got, next)
		_, err = b.Lookup(t.Context(), "device", "token:rep")
		checkErr(t, "Lookup of a released value", err, storage.ErrNotFound)
		// A unique value of another record is a conflict, as for Put.
		a := device("holder")
		must(t, b.Put(t.Context(), a))
		taken := next
		taken.Unique = []string{a.Unique[1]}
		checkErr(t, "Replace conflicting", b.Replace(t.Context(), taken, next.Data), storage.ErrConflict)
		// A deleted record is not brought back.
		must(t, b.Delete(t.Context(), "device", r.ID))
		checkErr(t, "Replace after Delete", b.Replace(t.Context(), next, next.Data), storage.ErrNotFound)
		_, err = b.Get(t.Context(), "device", r.ID)
		checkErr(t, "Get after a refused Replace", err, storage.ErrNotFound)
	})

	t.Run("Conflict", func(t *testing.T) {
		b := open(t)
		a := device("a")
		must(t, b.Put(t.Context(), a))
		c := device("c")
		must(t, b.Put(t.Context(), c))

		// A new record that takes a's value is not created.
		n := device("n")
		n.Unique = []string{"token:fresh", a.Unique[0]}
		err := b.Put(t.Context(), n)
		checkErr(t, "Put new conflicting", err, storage.ErrConflict)
		noSecret(t, "Put new conflicting", err, a.Unique[0])
		_, err = b.Get(t.Context(), "device", n.ID)
		checkErr(t, "Get rejected record", err, storage.ErrNotFound)
		_, err = b.Lookup(t.Context(), "device", "token:fresh")
		checkErr(t, "Lookup value of rejected record", err, storage.ErrNotFound)

		// An update of c that takes a's value changes nothing of c.
		c2 := c
		c2.Data = []byte("changed")
		c2.Unique = []string{"token:other-fresh", a.Unique[0]}
		checkErr(t, "Put update conflicting", b.Put(t.Context(), c2), storage.ErrConflict)
		got, err := b.Get(t.Context(), "device", c.ID)
		must(t, err)
		checkRecord(t, "c unchanged", got, c)
		for _, u := range c.Unique {
			got, err := b.Lookup(t.Context(), "device", u)
			must(t, err)
			checkRecord(t, "c still holds "+u, got, c)
		}
		_, err = b.Lookup(t.Context(), "device", "token:other-fresh")
		checkErr(t, "Lookup value of rejected update", err, storage.ErrNotFound)
		got, err = b.Lookup(t.Context(), "device", a.Unique[0])
		must(t, err)
		checkRecord(t, "a keeps its value", got, a)

		// Putting a record again with its own values is no conflict; other kinds
		// have their own unique values.
		must(t, b.Put(t.Context(), a))
		must(t, b.Put(t.Context(), storage.Record{Kind: "asset", ID: uuid.New(), Owner: owner, Unique: a.Unique}))
	})

	t.Run("List", func(t *testing.T) {
		b := open(t)
		other := uuid.New()
		var want []storage.Record
		for i := range 10 {
			r := device("d" + string(rune('0'+i)))
			must(t, b.Put(t.Context(), r))
			want = append(want, r)
		}
		must(t, b.Put(t.Context(), storage.Record{Kind: "device", ID: uuid.New(), Owner: other}))
		must(t, b.Put(t.Context(), storage.Record{Kind: "asset", ID: uuid.New(), Owner: owner}))
		slices.SortFunc(want, func(x, y storage.Record) int { return bytes.Compare(x.ID[:], y.ID[:]) })

		got, err := b.List(t.Context(), "device", owner)
		must(t, err)
		if len(got) != len(want) {
			t.Fatalf("List: got %d records, want %d", len(got), len(want))
		}
		for i := range got {
			checkRecord(t, "List", got[i], want[i])
		}
		got, err = b.List(t.Context(), "device", uuid.New())
		must(t, err)
		if len(got) != 0 {
			t.Fatalf("List of unknown owner: got %d records", len(got))
		}

		// Moving a record to another owner moves it between lists.
		moved := want[3]
		moved.Owner = other
		must(t, b.Put(t.Context(), moved))
		got, err = b.List(t.Context(), "device", owner)
		must(t, err)
		if len(got) != len(want)-1 {
			t.Fatalf("List after move: got %d records, want %d", len(got), len(want)-1)
		}
		got, err = b.List(t.Context(), "device", other)
		must(t, err)
		if len(got) != 2 || !slices.ContainsFunc(got, func(r storage.Record) bool { return r.ID == moved.ID }) {
			t.Fatalf("List of new owner: got %d records, want 2 with the moved one", len(got))
		}
	})

	t.Run("Count", func(t *testing.T) {
		b := open(t)
		count := func(kind string, owner uuid.UUID, want int) {
			t.Helper()
			n, err := b.Count(t.Context(), kind, owner)
			must(t, err)
			if n != want {
				t.Fatalf("Count %s of %s: got %d, want %d", kind, owner, n, want)
			}
		}
		other := uuid.New()
		count("device", owner, 0)
		var rs []storage.Record
		for i := range 10 {
			r := device("c" + string(rune('0'+i)))
			must(t, b.Put(t.Context(), r))
			rs = append(rs, r)
		}
		must(t, b.Put(t.Context(), storage.Record{Kind: "device", ID: uuid.New(), Owner: other}))
		must(t, b.Put(t.Context(), storage.Record{Kind: "asset", ID: uuid.New(), Owner: owner}))
		count("device", owner, 10)
		count("device", other, 1)
		count("asset", owner, 1)
		count("device", uuid.New(), 0)

		// An update is no new record; a Replace neither.
		upd := rs[0]
		upd.Data = []byte(`{"name":"c0","label":"x"}`)
		must(t, b.Put(t.Context(), upd))
		must(t, b.Replace(t.Context(), storage.Record{Kind: upd.Kind, ID: upd.ID, Owner: owner, Data: []byte(`{}`), Unique: upd.Unique}, upd.Data))
		count("device", owner, 10)
		// A record moved to another owner counts there; a deleted one nowhere.
		moved := rs[1]
		moved.Owner = other
		must(t, b.Put(t.Context(), moved))
		must(t, b.Delete(t.Context(), "device", rs[2].ID))
		count("device", owner, 8)
		count("device", other, 2)
		if list, err := b.List(t.Context(), "device", owner); err != nil || len(list) != 8 {
			t.Fatalf("List agrees with Count: %d records, %v", len(list), err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		b := open(t)
		r := device("gone")
		must(t, b.Put(t.Context(), r))
		must(t, b.Delete(t.Context(), "device", r.ID))
		_, err := b.Get(t.Context(), "device", r.ID)
		checkErr(t, "Get deleted", err, storage.ErrNotFound)
		for _, u := range r.Unique {
			_, err := b.Lookup(t.Context(), "device", u)
			checkErr(t, "Lookup deleted "+u, err, storage.ErrNotFound)
		}
		list, err := b.List(t.Context(), "device", owner)
		must(t, err)
		if len(list) != 0 {
			t.Fatalf("List after delete: got %d records", len(list))
		}
		checkErr(t, "Delete again", b.Delete(t.Context(), "device", r.ID), storage.ErrNotFound)
		// Its unique values are free again.
		again := device("again")
		again.Unique = r.Unique
		must(t, b.Put(t.Context(), again))
	})
}

// noSecret fails when err quotes the unique value v: unique values hold device
// tokens and provisioning keys, and errors are logged.
func noSecret(t *testing.T, what string, err error, v string) {
	t.Helper()
	_, secret, _ := strings.Cut(v, ":")
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("%s: the error %q quotes the unique value", what, err)
	}
}
