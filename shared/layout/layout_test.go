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

// Append lays the values out where the Lua's names resolve.
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
	src := strings.Join([]string{
		"local a = BATCH.orders -- ORDER.bogus in a comment is prose",
		"local ttl, n = ARGV[BATCH.ttl], ARGV[a + ORDER.n]",
		"local b = ORDER.item(a, 2)",
		"local c = ARGV[b + ITEM.size]",
		"a = a + ORDER.width(n) + ITEM.width()",
	}, "\n")
	got2, err := layout.Resolve(src, batchArgs)
	want2 := strings.Join([]string{
		"local a = 2 -- ORDER.bogus in a comment is prose",
		"local ttl, n = ARGV[1], ARGV[a + 1]",
		"local b = (a + 2 + ((2) - 1) * 2)",
		"local c = ARGV[b + 1]",
		"a = a + (2 + 2 * (n)) + 2",
	}, "\n")
	if err != nil || got2 != want2 {
		t.Fatalf("resolved %v:\n%s\nwant:\n%s", err, got2, want2)
	}
}

// A script that reads a name its layouts lack does not compose.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	for bad, name := range map[string]string{"ARGV[a + ORDER.qty]": "ORDER.qty", "ARGV[ORDR.n]": "ORDR.n", "ITEM.item(a, 1)": "ITEM.item", "BATCH.width()": "BATCH.width", "ORDER.count()": "ORDER.count"} {
		if _, err := layout.Resolve(bad, batchArgs); err == nil || !strings.Contains(err.Error(), name) {
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
