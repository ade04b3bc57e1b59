package yamlfile

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"sluice/deployment"
)

// pos is a 1-based line and column; zero when unknown.
type pos = deployment.Pos

// decoder turns a goccy/go-yaml AST into Go values by reflection. Unlike a
// stock decoder it keeps going after a problem, so one pass reports every
// unknown key and bad value, and it records the position of every field for
// the later validation and chain-building errors. ${VAR} references in scalar
// values are expanded here, on the parsed value, so an environment value can
// never change the document's structure or shift line numbers.
type decoder struct {
	file    string
	lookup  LookupFunc
	idx     deployment.Positions
	anchors map[string]ast.Node
	errs    deployment.Errors
	// failed holds the paths that failed to decode, so that validation does
	// not report the resulting zero value again.
	failed map[string]bool
	depth  int
}

func newDecoder(file string, lookup LookupFunc) *decoder {
	return &decoder{file: file, lookup: lookup, idx: deployment.Positions{}, anchors: map[string]ast.Node{}, failed: map[string]bool{}}
}

func (d *decoder) fail(path string, p pos, format string, args ...any) {
	d.failed[path] = true
	d.errs = append(d.errs, &deployment.Error{File: d.file, Line: p.Line, Col: p.Col, Field: path, Message: fmt.Sprintf(format, args...)})
}

func tokenPos(tk *token.Token) pos {
	if tk == nil || tk.Position == nil {
		return pos{}
	}
	return pos{Line: tk.Position.Line, Col: tk.Position.Column}
}

// nodePos is where a node starts as a reader sees it: a block mapping starts
// at its first key, not at its first ':'.
func nodePos(n ast.Node) pos {
	switch v := n.(type) {
	case nil:
		return pos{}
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return nodePos(v.Values[0])
		}
		return tokenPos(v.Start)
	case *ast.MappingValueNode:
		return nodePos(v.Key)
	case *ast.AnchorNode:
		return tokenPos(v.Start)
	case *ast.TagNode:
		return tokenPos(v.Start)
	case *ast.AliasNode:
		return tokenPos(v.Start)
	}
	return tokenPos(n.GetToken())
}

func (d *decoder) record(path string, key *pos, val ast.Node) {
	p := deployment.Place{Val: nodePos(val)}
	if key != nil {
		p.Key, p.HasKey = *key, true
	}
	d.idx[path] = p
}

// collectAnchors records every &anchor in n. A later anchor of the same name
// replaces an earlier one, as YAML prescribes for aliases that follow it.
func (d *decoder) collectAnchors(n ast.Node) {
	switch v := n.(type) {
	case *ast.DocumentNode:
		d.collectAnchors(v.Body)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Value)
	case *ast.SequenceNode:
		for _, x := range v.Values {
			d.collectAnchors(x)
		}
	case *ast.TagNode:
		d.collectAnchors(v.Value)
	case *ast.AnchorNode:
		if v.Name != nil && v.Name.GetToken() != nil {
			d.anchors[v.Name.GetToken().Value] = v.Value
		}
		d.collectAnchors(v.Value)
	}
}

// resolve strips tags and anchors and follows aliases. It returns nil (after
// reporting) for an alias to an unknown anchor.
func (d *decoder) resolve(n ast.Node, path string) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case *ast.TagNode:
			n = v.Value
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil && v.Value.GetToken() != nil {
				name = v.Value.GetToken().Value
			}
			target, ok := d.anchors[name]
			if !ok {
				d.fail(path, nodePos(v), "alias *%s has no anchor", name)
				return nil
			}
			n = target
		default:
			return n
		}
	}
	d.fail(path, nodePos(n), "aliases nested too deep")
	return nil
}

func isNull(n ast.Node) bool {
	_, ok := n.(*ast.NullNode)
	return n == nil || ok
}

func describe(n ast.Node) string {
	switch v := n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "an integer"
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode:
		return "nothing"
	default:
		return fmt.Sprintf("a %s", v.Type())
	}
}

// entry is one key/value of a mapping after merge keys are applied.
type entry struct {
	key    string
	keyPos pos
	val    ast.Node
}

// entries lists a mapping's entries; "<<" merge keys contribute the entries of
// the merged mapping(s) that the mapping does not set itself.
func (d *decoder) entries(n ast.Node, path string) ([]entry, bool) {
	var mvs []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		mvs = v.Values
	case *ast.MappingValueNode:
		mvs = []*ast.MappingValueNode{v}
	default:
		return nil, false
	}
	var out, merged []entry
	seen := map[string]bool{}
	for _, mv := range mvs {
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			src := d.resolve(mv.Value, path)
			var srcs []ast.Node
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, s := range seq.Values {
					srcs = append(srcs, d.resolve(s, path))
				}
			} else {
				srcs = []ast.Node{src}
			}
			for _, s := range srcs {
				es, ok := d.entries(s, path)
				if !ok {
					d.fail(path, nodePos(mv.Value), "a merge key (<<) needs a mapping or a list of mappings, got %s", describe(s))
					continue
				}
				merged = append(merged, es...)
			}
			continue
		}
		key := d.resolve(mv.Key, path)
		var name string
		switch k := key.(type) {
		case *ast.StringNode:
			name = k.Value
		case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
			name = k.GetToken().Value
		default:
			d.fail(path, nodePos(mv.Key), "mapping keys must be plain strings, got %s", describe(key))
			continue
		}
		seen[name] = true
		out = append(out, entry{key: name, keyPos: nodePos(mv.Key), val: mv.Value})
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out, true
}

type scalarKind uint8

const (
	kNull scalarKind = iota
	kBool
	kInt
	kFloat
	kString
)

type scalar struct {
	kind scalarKind
	text string // the value as written (after ${} expansion)
	b    bool
	i    int64
	u    uint64 // set instead of i when the integer does not fit int64
	big  bool
	f    float64
}

// scalar reads a resolved scalar node, expanding ${VAR} in strings. ok is
// false when n is a mapping or list.
func (d *decoder) scalar(n ast.Node, path string) (s scalar, ok bool) {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return scalar{kind: kNull}, true
	case *ast.BoolNode:
		return scalar{kind: kBool, b: v.Value, text: v.GetToken().Value}, true
	case *ast.IntegerNode:
		s := scalar{kind: kInt, text: v.GetToken().Value}
		switch x := v.Value.(type) {
		case int64:
			s.i = x
		case uint64:
			if x <= math.MaxInt64 {
				s.i = int64(x)
			} else {
				s.u, s.big = x, true
			}
		}
		return s, true
	case *ast.FloatNode:
		return scalar{kind: kFloat, f: v.Value, text: v.GetToken().Value}, true
	case *ast.InfinityNode:
		return scalar{kind: kFloat, f: v.Value, text: v.GetToken().Value}, true
	case *ast.NanNode:
		return scalar{kind: kFloat, f: math.NaN(), text: v.GetToken().Value}, true
	case *ast.StringNode:
		text, changed := d.expandAt(v.Value, path, nodePos(v), stringColShift(v))
		if changed && v.Token != nil && v.Token.Type == token.StringType {
			// An unquoted ${VAR} takes the type its value would have had if
			// written in place: "count: ${LIMIT}" is an integer.
			return resolvePlain(text), true
		}
		return scalar{kind: kString, text: text}, true
	case *ast.LiteralNode:
		raw := ""
		if v.Value != nil {
			raw = v.Value.Value
		}
		text, _ := d.expandAt(raw, path, tokenPos(v.Start), shiftBlock)
		return scalar{kind: kString, text: text}, true
	}
	return scalar{}, false
}

// Column shifts for expandAt.
const (
	shiftBlock   = -1 // a block scalar: its text starts on the line after p
	shiftUnknown = -2 // report the scalar's start
)

// expandAt expands raw and reports reference problems. shift places them:
// >= 0 means raw sits on one line starting shift columns after p, so the
// column of the offending "${" is exact; shiftBlock makes the line exact.
func (d *decoder) expandAt(raw, path string, p pos, shift int) (string, bool) {
	out, changed, errs := expand(raw, d.lookup)
	for _, e := range errs {
		ep := p
		switch {
		case shift == shiftBlock:
			ep.Line += 1 + strings.Count(raw[:e.Offset], "\n")
			ep.Col = 1
		case shift >= 0:
			ep.Col += shift + e.Offset
		}
		d.fail(path, ep, "%s", e.Message)
	}
	return out, changed
}

// stringColShift is where a string's value starts relative to its token, when
// offsets in the value are offsets in the line: 0 for a one-line plain
// scalar, 1 for a one-line quoted one without escapes.
func stringColShift(v *ast.StringNode) int {
	if v.Token == nil || strings.Contains(v.Value, "\n") {
		return shiftUnknown
	}
	switch v.Token.Type {
	case token.StringType:
		return 0
	case token.DoubleQuoteType, token.SingleQuoteType:
		if strings.ContainsAny(v.Value, "\\'\"") {
			return shiftUnknown
		}
		return 1
	}
	return shiftUnknown
}

var floatRE = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolvePlain types an unquoted scalar by the YAML 1.2 core schema.
func resolvePlain(t string) scalar {
	switch t {
	case "", "~", "null", "Null", "NULL":
		return scalar{kind: kNull, text: t}
	case "true", "True", "TRUE":
		return scalar{kind: kBool, b: true, text: t}
	case "false", "False", "FALSE":
		return scalar{kind: kBool, text: t}
	}
	if i, err := strconv.ParseInt(t, 10, 64); err == nil {
		return scalar{kind: kInt, i: i, text: t}
	}
	if u, err := strconv.ParseUint(t, 10, 64); err == nil {
		return scalar{kind: kInt, u: u, big: true, text: t}
	}
	if floatRE.MatchString(t) {
		if f, err := strconv.ParseFloat(t, 64); err == nil {
			return scalar{kind: kFloat, f: f, text: t}
		}
	}
	return scalar{kind: kString, text: t}
}

var (
	durationType = reflect.TypeFor[deployment.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// decodeValue decodes n into v; the caller has recorded path's place.
func (d *decoder) decodeValue(n ast.Node, v reflect.Value, path string) {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 100 {
		d.fail(path, nodePos(n), "document nested too deep")
		return
	}
	at := nodePos(n)
	n = d.resolve(n, path)
	if n == nil && at != (pos{}) {
		return // resolve reported
	}
	t := v.Type()
	if t == durationType {
		s, ok := d.scalar(n, path)
		switch {
		case ok && s.kind == kNull:
			v.SetInt(0)
		case ok && s.kind == kString:
			dur, err := deployment.ParseDuration(s.text)
			if err != nil {
				d.fail(path, at, "%v", err)
				return
			}
			v.SetInt(int64(dur))
		default:
			d.fail(path, at, "expected a duration like \"30s\", \"1h\" or \"1d\", got %s", describe(n))
		}
		return
	}
	if t == timeType {
		s, ok := d.scalar(n, path)
		if ok && s.kind == kString {
			tm, err := time.Parse(time.RFC3339, s.text)
			if err == nil {
				v.Set(reflect.ValueOf(tm.UTC()))
				return
			}
		}
		d.fail(path, at, "expected an RFC 3339 time like \"2030-01-31T00:00:00Z\", got %s", describe(n))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.SetZero()
			return
		}
		nv := reflect.New(t.Elem())
		d.decodeValue(n, nv.Elem(), path)
		v.Set(nv)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if isNull(n) {
			v.SetZero()
			return
		}
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			d.fail(path, at, "expected a list, got %s", describe(n))
			return
		}
		out := reflect.MakeSlice(t, len(seq.Values), len(seq.Values))
		for i, el := range seq.Values {
			p := deployment.IndexField(path, i)
			d.record(p, nil, el)
			d.decodeValue(el, out.Index(i), p)
		}
		v.Set(out)
	case reflect.Map, reflect.Interface:
		if isNull(n) {
			v.SetZero()
			return
		}
		if t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() != reflect.Interface {
			d.decodeTypedMap(n, v, path)
			return
		}
		val := d.toAny(n, path)
		if val == nil {
			return
		}
		rv := reflect.ValueOf(val)
		if !rv.Type().AssignableTo(t) {
			d.fail(path, at, "expected a mapping, got %s", describe(n))
			return
		}
		v.Set(rv)
	default:
		d.decodeScalar(n, v, path, at)
	}
}

func (d *decoder) decodeScalar(n ast.Node, v reflect.Value, path string, at pos) {
	s, ok := d.scalar(n, path)
	want := ""
	switch v.Kind() {
	case reflect.String:
		if ok {
			v.SetString(s.text)
			if s.kind == kNull {
				v.SetString("")
			}
			return
		}
		want = "a string"
	case reflect.Bool:
		if ok && (s.kind == kBool || s.kind == kNull) {
			v.SetBool(s.b)
			return
		}
		want = "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if ok && s.kind == kNull {
			v.SetInt(0)
			return
		}
		if ok && s.kind == kInt {
			if s.big || v.OverflowInt(s.i) {
				d.fail(path, at, "%s is out of range", s.text)
				return
			}
			v.SetInt(s.i)
			return
		}
		want = "an integer"
	case reflect.Float32, reflect.Float64:
		if ok && s.kind == kNull {
			v.SetFloat(0)
			return
		}
		if sn, plain := n.(*ast.StringNode); ok && plain && s.kind == kString && sn.Token != nil && sn.Token.Type == token.StringType {
			// goccy/go-yaml reads an unquoted 1e+06 as a string; the
			// YAML 1.2 core schema reads it as a number.
			s = resolvePlain(s.text)
		}
		if ok && (s.kind == kInt || s.kind == kFloat) {
			f := s.f
			if s.kind == kInt {
				f = float64(s.i)
				if s.big {
					f = float64(s.u)
				}
			}
			v.SetFloat(f)
			return
		}
		want = "a number"
	default:
		d.fail(path, at, "cannot decode into %s", v.Type())
		return
	}
	got := describe(n)
	if ok && s.kind != kNull {
		got = fmt.Sprintf("%s (%q)", got, s.text)
		if _, str := n.(*ast.StringNode); str && s.kind != kString {
			got = fmt.Sprintf("%q", s.text)
		}
	}
	d.fail(path, at, "expected %s, got %s", want, got)
}

// yamlFields maps a struct's YAML keys to field indexes, in declaration order.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	m := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = i
		names = append(names, name)
	}
	return m, names
}

func (d *decoder) decodeStruct(n ast.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	es, ok := d.entries(n, path)
	if !ok {
		d.fail(path, nodePos(n), "expected a mapping, got %s", describe(n))
		return
	}
	fields, names := yamlFields(v.Type())
	for _, e := range es {
		p := deployment.ChildField(path, e.key)
		kp := e.keyPos
		fi, ok := fields[e.key]
		if !ok {
			d.idx[p] = deployment.Place{Key: kp, HasKey: true, Val: nodePos(e.val)}
			d.fail(p, kp, "unknown field %q (known: %s)", e.key, strings.Join(names, ", "))
			continue
		}
		d.record(p, &kp, e.val)
		d.decodeValue(e.val, v.Field(fi), p)
	}
}

// decodeTypedMap decodes a mapping with string keys into a map whose values
// are typed (admission.classes), each value at path.key.
func (d *decoder) decodeTypedMap(n ast.Node, v reflect.Value, path string) {
	es, ok := d.entries(n, path)
	if !ok {
		d.fail(path, nodePos(n), "expected a mapping, got %s", describe(n))
		return
	}
	t := v.Type()
	m := reflect.MakeMapWithSize(t, len(es))
	for _, e := range es {
		p := deployment.ChildField(path, e.key)
		kp := e.keyPos
		d.record(p, &kp, e.val)
		el := reflect.New(t.Elem()).Elem()
		d.decodeValue(e.val, el, p)
		m.SetMapIndex(reflect.ValueOf(e.key).Convert(t.Key()), el)
	}
	v.Set(m)
}

// toAny converts a subtree to plain values (map[string]any, []any, string,
// int64 or uint64, float64, bool, nil), recording every position: policy
// params are decoded later by the registry, and their errors mapped back here.
func (d *decoder) toAny(n ast.Node, path string) any {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 100 {
		d.fail(path, nodePos(n), "document nested too deep")
		return nil
	}
	at := nodePos(n)
	n = d.resolve(n, path)
	if es, ok := d.entries(n, path); ok {
		m := make(map[string]any, len(es))
		for _, e := range es {
			p := deployment.ChildField(path, e.key)
			kp := e.keyPos
			d.record(p, &kp, e.val)
			m[e.key] = d.toAny(e.val, p)
		}
		return m
	}
	if seq, ok := n.(*ast.SequenceNode); ok {
		out := make([]any, len(seq.Values))
		for i, el := range seq.Values {
			p := deployment.IndexField(path, i)
			d.record(p, nil, el)
			out[i] = d.toAny(el, p)
		}
		return out
	}
	s, ok := d.scalar(n, path)
	if !ok {
		if n != nil {
			d.fail(path, at, "unsupported value: %s", describe(n))
		}
		return nil
	}
	switch s.kind {
	case kBool:
		return s.b
	case kInt:
		if s.big {
			return s.u
		}
		return s.i
	case kFloat:
		return s.f
	case kString:
		return s.text
	}
	return nil
}
