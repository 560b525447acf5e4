package engine

import (
	"math"
	"testing"
)

// TestMakePageCounts: pages are counted and cut right for every page size, up to
// the largest int, where rounding up by adding pageSize - 1 would overflow.
func TestMakePageCounts(t *testing.T) {
	spec := pageSpec[int]{
		text: func(int) string { return "" },
		keys: map[string]func(int) sortKey{"createdTime": func(n int) sortKey { return numKey(int64(n)) }},
	}
	items := []int{0, 1, 2, 3, 4}
	for _, c := range []struct {
		size, page, pages int
		want              []int
		next              bool
	}{
		{1, 0, 5, []int{0}, true},
		{2, 2, 3, []int{4}, false},
		{5, 0, 1, []int{0, 1, 2, 3, 4}, false},
		{5, 1, 1, []int{}, false},
		{math.MaxInt, 0, 1, []int{0, 1, 2, 3, 4}, false},
		{math.MaxInt - 1, 1, 1, []int{}, false},
		{3, math.MaxInt, 2, []int{}, false},
	} {
		got, err := makePage(items, PageLink{PageSize: c.size, Page: c.page}, spec)
		if err != nil || got.TotalPages != c.pages || got.TotalElements != 5 || got.HasNext != c.next || len(got.Data) != len(c.want) {
			t.Errorf("size %d page %d: %+v, %v", c.size, c.page, got, err)
			continue
		}
		for i := range c.want {
			if got.Data[i] != c.want[i] {
				t.Errorf("size %d page %d: %v, want %v", c.size, c.page, got.Data, c.want)
			}
		}
	}
}
