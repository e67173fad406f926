// Package layout names a Redis script's KEYS and ARGV once, in Go. A Layout
// lists a script's arguments, or one record of them, by name and in order:
// the same description appends the values (Append) and gives the Lua its
// names, so the Lua reads ARGV[UNDO.fp] or argv[a + SPEND.nonce], never a
// position counted by hand, and adding an argument is one line here.
//
// Script resolves the names when it composes a script: each becomes its
// number in the source Redis runs, so they cost nothing per call, and a
// name the Lua reads that its layouts lack panics there, at the service's
// start and in every test, never on Redis.
package layout

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Layout is the order of a script's KEYS (E string) or ARGV (E any), or of
// one record in them, filled from a T. Fixed fields come first; the last
// field alone may be variable: a nested layout, n records (Each), or
// records to the end (Rest). Build one with Args or Record.
type Layout[T, E any] struct {
	name   string
	record bool
	fields []Field[T, E]
	fixed  int  // width of the fixed part, and of the whole when per is 0
	per    int  // width per repeated record: the layout is fixed + per*n wide
	rest   bool // ends with records to the end: no width
	each   bool // its last field is Each: records start at item(a, i)
}

// Field is one named part of a Layout.
type Field[T, E any] struct {
	name       string
	put        func([]E, T) []E
	fixed, per int
	rest, each bool
	sub        Lua
}

// Value is one argument, v's value for T.
func Value[T, E any](name string, v func(T) E) Field[T, E] {
	return Field[T, E]{name: name, fixed: 1, put: func(dst []E, t T) []E { return append(dst, v(t)) }}
}

// Nest is sub's fields in place, filled from f's value for T.
func Nest[T, U, E any](name string, sub *Layout[U, E], f func(T) U) Field[T, E] {
	if sub.rest {
		panic("layout: " + name + ": cannot nest " + sub.name + ", which runs to the end")
	}
	return Field[T, E]{name: name, sub: sub, fixed: sub.fixed, per: sub.per,
		put: func(dst []E, t T) []E { return sub.Append(dst, f(t)) }}
}

// Each is one record of sub (a fixed-width layout) per element of f's
// value for T.
func Each[T, U, E any](name string, sub *Layout[U, E], f func(T) []U) Field[T, E] {
	if sub.rest || sub.per != 0 {
		panic("layout: " + name + ": records of " + sub.name + " have no fixed width")
	}
	return Field[T, E]{name: name, sub: sub, per: sub.fixed, each: true,
		put: func(dst []E, t T) []E {
			for _, u := range f(t) {
				dst = sub.Append(dst, u)
			}
			return dst
		}}
}

// Rest is records of sub from here to the end, as many as the caller
// appends with sub.Append: the Lua loops until ARGV (or KEYS) ends.
func Rest[T, U, E any](name string, sub *Layout[U, E]) Field[T, E] {
	return Field[T, E]{name: name, sub: sub, rest: true, put: func(dst []E, _ T) []E { return dst }}
}

// Args is a script's whole KEYS or ARGV: its names in the Lua are 1-based
// indices (KEYS[UNDO_KEYS.idem]).
func Args[T, E any](name string, fs ...Field[T, E]) *Layout[T, E] {
	return build(name, false, fs)
}

// Record is one record within KEYS or ARGV, starting wherever its script
// puts it: its names in the Lua are offsets from the record's first index
// (argv[a + SPEND.nonce]), and width(n), the record's width with n
// repeated records inside it.
func Record[T, E any](name string, fs ...Field[T, E]) *Layout[T, E] {
	return build(name, true, fs)
}

var luaName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func build[T, E any](name string, record bool, fs []Field[T, E]) *Layout[T, E] {
	l := &Layout[T, E]{name: name, record: record, fields: fs}
	seen := map[string]bool{}
	for i, f := range fs {
		switch {
		case !luaName.MatchString(f.name) || reserved[f.name]:
			panic(fmt.Sprintf("layout: %s: field %q cannot be a Lua name", name, f.name))
		case seen[f.name]:
			panic(fmt.Sprintf("layout: %s: field %q twice", name, f.name))
		case (f.per != 0 || f.rest) && i != len(fs)-1:
			panic(fmt.Sprintf("layout: %s: variable field %q must be the last", name, f.name))
		}
		seen[f.name] = true
		l.fixed += f.fixed
		l.per, l.rest, l.each = f.per, f.rest, f.each
	}
	return l
}

// reserved are Lua's keywords and the names of a layout's arithmetic.
var reserved = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
	"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
	"width": true, "count": true, "item": true,
}

// Append appends v's values to dst in the layout's order.
func (l *Layout[T, E]) Append(dst []E, v T) []E {
	for _, f := range l.fields {
		dst = f.put(dst, v)
	}
	return dst
}

// Fill is v's values in a slice of their exact size, n the count of the
// repeated records inside (n buckets): one allocation.
func (l *Layout[T, E]) Fill(n int, v T) []E {
	return l.Append(make([]E, 0, l.Width(n)), v)
}

// Width is how many values Append adds with n repeated records inside
// (n buckets); a layout that runs to the end has no width.
func (l *Layout[T, E]) Width(n int) int {
	if l.rest {
		panic("layout: " + l.name + " runs to the end: no width")
	}
	return l.fixed + l.per*n
}

// Lua is a layout as a script's names resolve against it.
type Lua interface {
	luaName() string
	shape() shape
	subs() []Lua
}

// shape is what a layout's names resolve to: each field's offset (a
// record's, from its first index) or index (a whole KEYS or ARGV's), and
// its width, fixed + per*n.
type shape struct {
	at         map[string]int
	fixed, per int
	record     bool
	rest, each bool
}

func (l *Layout[T, E]) luaName() string { return l.name }

func (l *Layout[T, E]) subs() []Lua {
	var out []Lua
	for _, f := range l.fields {
		if f.sub != nil {
			out = append(out, f.sub)
		}
	}
	return out
}

func (l *Layout[T, E]) shape() shape {
	sh := shape{at: make(map[string]int, len(l.fields)), fixed: l.fixed, per: l.per, record: l.record, rest: l.rest, each: l.each}
	at := 1
	if l.record {
		at = 0
	}
	for _, f := range l.fields {
		sh.at[f.name] = at
		at += f.fixed
	}
	return sh
}

// all is ls and every layout nested in them, each once, by name.
func all(ls []Lua) map[string]shape {
	out := map[string]shape{}
	seen := map[string]Lua{}
	var walk func(Lua)
	walk = func(l Lua) {
		if prev, ok := seen[l.luaName()]; ok {
			if prev != l {
				panic("layout: two layouts named " + l.luaName())
			}
			return
		}
		seen[l.luaName()] = l
		out[l.luaName()] = l.shape()
		for _, s := range l.subs() {
			walk(s)
		}
	}
	for _, l := range ls {
		walk(l)
	}
	return out
}

var (
	// NAME.width(n), NAME.count(len): a record's width with n repeated
	// records in it; how many repeated records len values hold.
	widthRef = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)\.(width|count)\(([^(),]*)\)`)
	// NAME.item(a, i): where the i-th repeated record starts, the layout
	// starting at a.
	itemRef = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)\.item\(([^(),]*),([^(),]*)\)`)
	// NAME.field: a field's offset or index.
	fieldRef = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// Resolve is src with every name of ls it reads replaced by its number, as
// Redis will run it: NAME.field by the field's offset (a record's) or index
// (a whole KEYS or ARGV's), NAME.width(n), NAME.count(len) and
// NAME.item(a, i) by their arithmetic. Comments are left as they are. It
// fails on a name that ls and the layouts nested in them lack.
func Resolve(src string, ls ...Lua) (string, error) {
	by := all(ls)
	var bad []string
	fail := func(ref string) string { bad = append(bad, ref); return ref }
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		code, comment := line, ""
		if j := strings.Index(line, "--"); j >= 0 {
			code, comment = line[:j], line[j:]
		}
		code = widthRef.ReplaceAllStringFunc(code, func(ref string) string {
			m := widthRef.FindStringSubmatch(ref)
			sh, ok := by[m[1]]
			arg := strings.TrimSpace(m[3])
			switch {
			case !ok || sh.rest:
				return fail(ref)
			case m[2] == "width" && sh.record && sh.per == 0 && arg == "":
				return strconv.Itoa(sh.fixed)
			case m[2] == "width" && sh.record && sh.per != 0 && arg != "":
				return fmt.Sprintf("(%d + %d * (%s))", sh.fixed, sh.per, arg)
			case m[2] == "count" && sh.per != 0 && arg != "":
				return fmt.Sprintf("((%s) - %d) / %d", arg, sh.fixed, sh.per)
			}
			return fail(ref)
		})
		code = itemRef.ReplaceAllStringFunc(code, func(ref string) string {
			m := itemRef.FindStringSubmatch(ref)
			sh, ok := by[m[1]]
			if !ok || !sh.record || !sh.each {
				return fail(ref)
			}
			return fmt.Sprintf("(%s + %d + ((%s) - 1) * %d)", strings.TrimSpace(m[2]), sh.fixed, strings.TrimSpace(m[3]), sh.per)
		})
		code = fieldRef.ReplaceAllStringFunc(code, func(ref string) string {
			m := fieldRef.FindStringSubmatch(ref)
			at, ok := by[m[1]].at[m[2]]
			if !ok {
				return fail(ref)
			}
			return strconv.Itoa(at)
		})
		lines[i] = code + comment
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("layout: the script reads %s, which its layouts lack", strings.Join(bad, ", "))
	}
	return strings.Join(lines, "\n"), nil
}

// Script is src with the names of ls resolved (Resolve). It panics if src
// reads a name they lack, so a mismatch stops the program where the script
// is composed, at its start, never a call in production. Run the result
// with Script.Run: it loads itself again after a SCRIPT FLUSH or a
// failover.
func Script(src string, ls ...Lua) *redis.Script {
	out, err := Resolve(src, ls...)
	if err != nil {
		panic(err)
	}
	return redis.NewScript(out)
}
