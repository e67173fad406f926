package layout_test

import (
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/layout"
)

type item struct {
	name string
	size int
}

type order struct {
	id    string
	items []item
}

var (
	itemArgs  = layout.Record("ITEM", layout.Value("name", func(i item) any { return i.name }), layout.Value("size", func(i item) any { return i.size }))
	orderArgs = layout.Record("ORDER",
		layout.Value("id", func(o order) any { return o.id }),
		layout.Value("n", func(o order) any { return len(o.items) }),
		layout.Each("items", itemArgs, func(o order) []item { return o.items }),
	)
	batchArgs = layout.Args("BATCH", layout.Value("ttl", func(struct{}) any { return 60 }), layout.Rest[struct{}]("orders", orderArgs))
)

// Append lays the values out in the order the Lua tables name them.
func TestAppendFollowsTheNames(t *testing.T) {
	o := order{id: "o1", items: []item{{"a", 1}, {"b", 2}}}
	got := orderArgs.Append(batchArgs.Append(nil, struct{}{}), o)
	want := []any{60, "o1", 2, "a", 1, "b", 2}
	if len(got) != len(want) {
		t.Fatalf("appended %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("appended %v, want %v", got, want)
		}
	}
	if w := orderArgs.Width(2); w != len(want)-1 {
		t.Fatalf("width %d, want %d", w, len(want)-1)
	}
	p := layout.Prelude(batchArgs)
	for _, s := range []string{
		"local BATCH = layout('BATCH', {ttl = 1, orders = 2, })",
		"local ORDER = layout('ORDER', {id = 0, n = 1, items = 2, width = function(n) return 2 + 2 * n end, count = function(len) return (len - 2) / 2 end, item = function(a, i) return a + 2 + (i - 1) * 2 end, })",
		"local ITEM = layout('ITEM', {name = 0, size = 1, width = function() return 2 end, })",
	} {
		if !strings.Contains(p, s) {
			t.Errorf("prelude lacks %s:\n%s", s, p)
		}
	}
}

// A script that reads a name its layouts lack does not compose.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	ok := "local a = BATCH.orders\nlocal n = ARGV[a + ORDER.n] -- ORDER.bogus in a comment is prose\nlocal b = ORDER.item(a, 1) + ITEM.size + ORDER.width(n)"
	if err := layout.Check(ok, batchArgs); err != nil {
		t.Fatal(err)
	}
	for bad, name := range map[string]string{"ARGV[a + ORDER.qty]": "ORDER.qty", "ARGV[ORDR.n]": "ORDR.n", "ITEM.item(a, 1)": "ITEM.item", "BATCH.width()": "BATCH.width"} {
		if err := layout.Check(bad, batchArgs); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Script composed a script that reads ORDER.qty")
		}
	}()
	layout.Script("return ARGV[ORDER.qty]", batchArgs)
}

// A layout that cannot be named in Lua, or whose width is ambiguous, is
// refused where it is written.
func TestBadLayoutsPanic(t *testing.T) {
	for name, build := range map[string]func(){
		"keyword": func() { layout.Record("X", layout.Value("until", func(int) any { return 0 })) },
		"twice": func() {
			layout.Record("X", layout.Value("a", func(int) any { return 0 }), layout.Value("a", func(int) any { return 0 }))
		},
		"variable first": func() {
			layout.Record("X", layout.Rest[int]("r", itemArgs), layout.Value("a", func(int) any { return 0 }))
		},
		"each of each": func() { layout.Each("o", orderArgs, func(int) []order { return nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			build()
		}()
	}
}
