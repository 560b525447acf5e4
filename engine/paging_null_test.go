package engine

import (
	"slices"
	"strings"
	"testing"
)

// TestMakePageNulls: nullKey sorts as PostgreSQL's NULL by default, last
// ascending and first descending, equal keys keeping their order.
func TestMakePageNulls(t *testing.T) {
	type item struct {
		name string
		key  sortKey
	}
	spec := pageSpec[item]{
		text: func(i item) string { return i.name },
		keys: map[string]func(item) sortKey{
			"createdTime": func(i item) sortKey { return i.key },
		},
	}
	items := []item{{"n1", nullKey}, {"b", strKey("b")}, {"n2", nullKey}, {"a", strKey("A")}, {"c", strKey("c")}}
	nums := []item{{"n1", nullKey}, {"ten", numKey(10)}, {"n2", nullKey}, {"minus", numKey(-1)}}
	for _, c := range []struct {
		items []item
		order string
		want  string
	}{
		{items, "ASC", "a,b,c,n1,n2"},
		{items, "", "a,b,c,n1,n2"},
		{items, "desc", "n1,n2,c,b,a"},
		{nums, "ASC", "minus,ten,n1,n2"},
		{nums, "DESC", "n1,n2,ten,minus"},
	} {
		page, err := makePage(slices.Clone(c.items), PageLink{PageSize: 10, SortProperty: "createdTime", SortOrder: c.order}, spec)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, i := range page.Data {
			got = append(got, i.name)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: %v, want %s", c.order, got, c.want)
		}
	}
}
