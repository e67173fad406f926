// Package layout names a Redis script's KEYS and ARGV once, in Go. A Layout
// lists a script's arguments, or one record of them, by name and in order:
// the same description appends the values (Append) and gives the Lua its
// names (Script prepends a prelude of one table per layout), so the Lua
// reads ARGV[UNDO.fp] or argv[a + SPEND.nonce], never a position counted by
// hand, and adding an argument is one line here.
//
// A name the Lua reads that its layouts lack fails when the script is
// composed (Script panics, at the service's start and in every test), and a
// lookup the check could not see fails the call on Redis (the tables raise
// an error for an unknown field) rather than reading nil.
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

// Args is a script's whole KEYS or ARGV: its Lua table holds 1-based
// indices (KEYS[UNDO_KEYS.idem]).
func Args[T, E any](name string, fs ...Field[T, E]) *Layout[T, E] {
	return build(name, false, fs)
}

// Record is one record within KEYS or ARGV, starting wherever its script
// puts it: its Lua table holds offsets from the record's first index
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

// reserved are Lua's keywords and the names the prelude itself gives.
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

// Width is how many values Append adds with n repeated records inside
// (n buckets); a layout that runs to the end has no width.
func (l *Layout[T, E]) Width(n int) int {
	if l.rest {
		panic("layout: " + l.name + " runs to the end: no width")
	}
	return l.fixed + l.per*n
}

// Lua is a layout as the prelude renders it.
type Lua interface {
	luaName() string
	lua() string
	names() map[string]bool
	subs() []Lua
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

func (l *Layout[T, E]) names() map[string]bool {
	out := make(map[string]bool, len(l.fields)+3)
	for _, f := range l.fields {
		out[f.name] = true
	}
	if l.record && !l.rest {
		out["width"] = true
	}
	if l.per != 0 {
		out["count"] = true
	}
	if l.record && l.each {
		out["item"] = true
	}
	return out
}

// lua renders the layout's table: each field's offset (a record's) or
// index (a script's), and the functions of its width.
func (l *Layout[T, E]) lua() string {
	var b strings.Builder
	base := 1
	if l.record {
		base = 0
	}
	at := base
	fmt.Fprintf(&b, "local %s = layout('%s', {", l.name, l.name)
	for _, f := range l.fields {
		fmt.Fprintf(&b, "%s = %d, ", f.name, at)
		at += f.fixed
	}
	fixed, per := strconv.Itoa(l.fixed), strconv.Itoa(l.per)
	switch {
	case l.record && !l.rest && l.per == 0:
		fmt.Fprintf(&b, "width = function() return %s end, ", fixed)
	case l.record && !l.rest:
		fmt.Fprintf(&b, "width = function(n) return %s + %s * n end, ", fixed, per)
	}
	if l.per != 0 {
		fmt.Fprintf(&b, "count = function(len) return (len - %s) / %s end, ", fixed, per)
	}
	if l.record && l.each {
		fmt.Fprintf(&b, "item = function(a, i) return a + %s + (i - 1) * %s end, ", fixed, per)
	}
	b.WriteString("})\n")
	return b.String()
}

const preludeHead = `-- The names of KEYS and ARGV, rendered from their Go layouts (shared/layout).
local function layout(name, t)
  return setmetatable(t, {__index = function(_, k) error(name .. ' has no field ' .. tostring(k), 2) end})
end
`

// all is ls and every layout nested in them, each once, by name.
func all(ls []Lua) []Lua {
	var out []Lua
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
		out = append(out, l)
		for _, s := range l.subs() {
			walk(s)
		}
	}
	for _, l := range ls {
		walk(l)
	}
	return out
}

// Prelude is the Lua tables of ls and of the layouts nested in them.
func Prelude(ls ...Lua) string {
	var b strings.Builder
	b.WriteString(preludeHead)
	for _, l := range all(ls) {
		b.WriteString(l.lua())
	}
	return b.String()
}

var (
	comment = regexp.MustCompile(`--[^\n]*`)
	ref     = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// Check reports every NAME.field src reads (outside comments) that ls and
// the layouts nested in them do not give.
func Check(src string, ls ...Lua) error {
	by := map[string]map[string]bool{}
	for _, l := range all(ls) {
		by[l.luaName()] = l.names()
	}
	var bad []string
	for _, m := range ref.FindAllStringSubmatch(comment.ReplaceAllString(src, ""), -1) {
		fields, ok := by[m[1]]
		if !ok || !fields[m[2]] {
			bad = append(bad, m[0])
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("layout: the script reads %s, which its layouts lack", strings.Join(bad, ", "))
	}
	return nil
}

// Script is src run with the names of ls: the prelude, then src. It panics
// if src reads a name they lack (Check), so a mismatch stops the program at
// its start, never a call in production. Run the result with Script.Run: it
// loads itself again after a SCRIPT FLUSH or a failover.
func Script(src string, ls ...Lua) *redis.Script {
	if err := Check(src, ls...); err != nil {
		panic(err)
	}
	return redis.NewScript(Prelude(ls...) + src)
}
