package llmapi

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"sluice/gwerror"
)

// The walk: one pass of jsontext tokens over the whole body. jsontext checks
// the syntax and UTF-8; the parser checks member names at every depth (equal
// or equal up to case: both are refused) and reads the fields it needs.
// Nothing is copied: names (unless escaped) and captured values are
// subslices of the body.

// begin consumes '{' or '[' and opens it.
func (p *parser) begin() *gwerror.Error {
	if _, err := p.dec.ReadToken(); err != nil {
		return syntaxError(err)
	}
	p.open = append(p.open, object{names: len(p.names)})
	return nil
}

// end consumes '}' or ']' and closes the innermost open object or array.
func (p *parser) end() *gwerror.Error {
	o := p.open[len(p.open)-1]
	if names := p.names[o.names:]; len(names) > smallObject {
		if a, b := p.largeObjectCollision(names); a != nil {
			return p.foldCollision(a, b)
		}
	}
	if _, err := p.dec.ReadToken(); err != nil {
		return syntaxError(err)
	}
	p.open = p.open[:len(p.open)-1]
	p.names = p.names[:o.names]
	if len(p.names) == 0 {
		p.unescaped = p.unescaped[:0]
	}
	return nil
}

// nameRef locates an unescaped member name: off and n in the body, or, when
// off has escapedName set, in parser.unescaped. Eight bytes per name keep
// the walk's memory small on objects with very many members.
type nameRef struct{ off, n uint32 }

const escapedName = 1 << 31

func (p *parser) nameBytes(r nameRef) []byte {
	if r.off&escapedName != 0 {
		off := r.off &^ escapedName
		return p.unescaped[off : off+r.n]
	}
	return p.body[r.off : r.off+r.n]
}

// name reads the next member name of the innermost open object and checks it
// against its siblings. known, when set, are the fields the gateway reads at
// this level (their params prefixed with prefix): a name that folds to one of
// them without being spelled exactly is refused.
func (p *parser) name(known []string, prefix string) ([]byte, *gwerror.Error) {
	if p.members++; p.members > MaxMembers {
		return nil, invalidJSON("request body has more than %d object members", MaxMembers)
	}
	v, err := p.dec.ReadValue()
	if err != nil {
		return nil, syntaxError(err)
	}
	end := int(p.dec.InputOffset())
	quoted := p.body[end-len(v) : end]
	name := quoted[1 : len(quoted)-1]
	ref := nameRef{uint32(end - len(v) + 1), uint32(len(name))}
	if bytes.IndexByte(name, '\\') >= 0 {
		start := len(p.unescaped)
		if p.unescaped, err = jsontext.AppendUnquote(p.unescaped, quoted); err != nil {
			return nil, syntaxError(err)
		}
		name = p.unescaped[start:]
		ref = nameRef{uint32(start) | escapedName, uint32(len(name))}
	}
	if known != nil {
		if gerr := misspelled(name, known, prefix); gerr != nil {
			return nil, gerr
		}
	}
	if other := p.sibling(name, ref); other != nil {
		return nil, p.foldCollision(other, name)
	}
	return name, nil
}

// sibling adds name to the innermost open object and returns an earlier name
// of that object equal to it up to case, or nil. The first smallObject names
// of an object are compared pairwise as they come; a larger object is checked
// once, when it closes (largeObjectCollision). Nothing is allocated per name.
func (p *parser) sibling(name []byte, ref nameRef) []byte {
	o := &p.open[len(p.open)-1]
	siblings := p.names[o.names:]
	if len(siblings) < smallObject {
		for _, r := range siblings {
			if s := p.nameBytes(r); bytes.EqualFold(s, name) {
				return s
			}
		}
	}
	p.names = append(p.names, ref)
	return nil
}

// largeObjectCollision finds two names of a closing object with more than
// smallObject names that are equal up to case: it sorts the names by a hash
// of their folded form (seeded per parse, so a client cannot aim for
// collisions) and compares the names of equal hashes with bytes.EqualFold.
func (p *parser) largeObjectCollision(names []nameRef) (first, second []byte) {
	if p.seed == (maphash.Seed{}) {
		p.seed = maphash.MakeSeed()
	}
	p.hashes = slices.Grow(p.hashes[:0], len(names))
	for i, r := range names {
		p.scratch = appendFolded(p.scratch[:0], p.nameBytes(r))
		p.hashes = append(p.hashes, hashedName{maphash.Bytes(p.seed, p.scratch), i})
	}
	slices.SortFunc(p.hashes, func(a, b hashedName) int { return cmp.Compare(a.hash, b.hash) })
	for i := 1; i < len(p.hashes); i++ {
		for j := i - 1; j >= 0 && p.hashes[j].hash == p.hashes[i].hash; j-- {
			a, b := p.hashes[j].index, p.hashes[i].index
			if x, y := p.nameBytes(names[min(a, b)]), p.nameBytes(names[max(a, b)]); bytes.EqualFold(x, y) {
				return x, y
			}
		}
	}
	return nil, nil
}

type hashedName struct {
	hash  uint64
	index int
}

// misspelled reports a name that a case-insensitive decoder reads as one of
// the known fields but that is not spelled exactly like it.
func misspelled(name []byte, known []string, prefix string) *gwerror.Error {
	s := view(name)
	for _, k := range known {
		if s == k {
			return nil
		}
	}
	for _, k := range known {
		if strings.EqualFold(s, k) {
			return invalidField(prefix+k, "the request field %q must be spelled %q: field names are case-sensitive, and an upstream that matches them case-insensitively would read it as %s",
				s, k, prefix+k)
		}
	}
	return nil
}

func (p *parser) foldCollision(first, second []byte) *gwerror.Error {
	at := string(p.dec.StackPointer().Parent())
	if at == "" {
		at = "the top level"
	}
	if bytes.Equal(first, second) {
		return invalidJSON("request body is not valid JSON: duplicate member name %q at %s; a member name may appear only once per object", first, at)
	}
	return invalidJSON("request body is not valid JSON: member names %q and %q at %s differ only in case; names of one object must differ by more than case", first, second, at)
}

// appendFolded appends the case-folded form of name: every rune replaced by
// the smallest rune of its Unicode simple-folding orbit, so that two names
// have equal folded forms exactly when bytes.EqualFold (Go encoding/json's
// name matching) holds for them.
func appendFolded(dst, name []byte) []byte {
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(name[i:])
		i += n
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
	}
	return dst
}

// listShape tallies the kinds of an array's elements.
type listShape struct {
	strings, numbers, arrays, others int
}

func (l *listShape) len() int { return l.strings + l.numbers + l.arrays + l.others }

// skip walks the next value, checking the member names of every object in
// it. When list is set and the value is an array, its elements' kinds are
// tallied into list.
func (p *parser) skip(list *listShape) *gwerror.Error {
	base := len(p.open)
	if p.dec.PeekKind() != '[' {
		list = nil
	}
	for {
		depth := len(p.open)
		if depth > base {
			if k, n := p.dec.StackIndex(p.dec.StackDepth()); k == '{' && n%2 == 0 && p.dec.PeekKind() == '"' {
				if _, gerr := p.name(nil, ""); gerr != nil {
					return gerr
				}
				continue
			}
		}
		kind := p.dec.PeekKind()
		if list != nil && depth == base+1 {
			switch kind {
			case '"':
				list.strings++
			case '0':
				list.numbers++
			case '[':
				list.arrays++
			case ']':
			default:
				list.others++
			}
		}
		switch kind {
		case '{', '[':
			if gerr := p.begin(); gerr != nil {
				return gerr
			}
		case '}', ']':
			if gerr := p.end(); gerr != nil {
				return gerr
			}
		default:
			if err := p.dec.SkipValue(); err != nil {
				return syntaxError(err)
			}
		}
		if len(p.open) == base {
			return nil
		}
	}
}

// capture walks the next value like skip and stores its raw bytes (a
// subslice of the body) in the request field of the member name.
func (p *parser) capture(name string, list *listShape) *gwerror.Error {
	start := int(p.dec.InputOffset())
	if gerr := p.skip(list); gerr != nil {
		return gerr
	}
	raw := bytes.TrimLeft(p.body[start:p.dec.InputOffset()], " \t\r\n:")
	switch name {
	case "messages":
		p.req.Messages = raw
	case "system":
		p.req.System = raw
	case "prompt":
		p.req.Prompt = raw
	case "input":
		p.req.Input = raw
	case "instructions":
		p.req.Instructions = raw
	case "tools":
		p.req.Tools = raw
	}
	return nil
}

func (p *parser) readModel() *gwerror.Error {
	switch p.dec.PeekKind() {
	case 'n':
		_, err := p.dec.ReadToken()
		if err != nil {
			return syntaxError(err)
		}
		return nil
	case '"':
		tok, err := p.dec.ReadToken()
		if err != nil {
			return syntaxError(err)
		}
		p.model, p.hasModel = tok.String(), true
		return nil
	}
	p.hasModel, p.modelBad = true, true
	return p.skip(nil)
}

// readBool reads a boolean or null (absent) into *dst.
func (p *parser) readBool(param string, dst *bool) (set bool, _ *gwerror.Error) {
	switch p.dec.PeekKind() {
	case 'n', 't', 'f':
		tok, err := p.dec.ReadToken()
		if err != nil {
			return false, syntaxError(err)
		}
		if tok.Kind() == 'n' {
			return false, nil
		}
		*dst = tok.Bool()
		return true, nil
	case 0:
		_, err := p.dec.ReadToken()
		return false, syntaxError(err)
	}
	return false, invalidField(param, "%s must be a boolean", param)
}

// readInt reads an integer in [lo, hi] or null (absent) into *dst. JSON
// numbers with a fraction or an exponent are refused even when integral:
// decoders disagree on them.
func (p *parser) readInt(param string, lo, hi int64, dst *int64) (set bool, _ *gwerror.Error) {
	switch p.dec.PeekKind() {
	case 'n':
		if _, err := p.dec.ReadToken(); err != nil {
			return false, syntaxError(err)
		}
		return false, nil
	case '0':
		v, err := p.dec.ReadValue()
		if err != nil {
			return false, syntaxError(err)
		}
		n, ok := parseBoundedInt(v, hi)
		if !ok || n < lo {
			return false, invalidField(param, "%s must be an integer from %d to %d", param, lo, hi)
		}
		*dst = n
		return true, nil
	case 0:
		_, err := p.dec.ReadToken()
		return false, syntaxError(err)
	}
	return false, invalidField(param, "%s must be an integer from %d to %d", param, lo, hi)
}

// parseBoundedInt parses a JSON number that is an integer no larger than hi
// (hi < 2^62). ok is false for a fraction, an exponent or a value above hi.
func parseBoundedInt(v []byte, hi int64) (n int64, ok bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > hi {
			if neg {
				return -1, true // below any lo >= 0
			}
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

func (p *parser) readStreamOptions() *gwerror.Error {
	switch p.dec.PeekKind() {
	case 'n':
		if _, err := p.dec.ReadToken(); err != nil {
			return syntaxError(err)
		}
		return nil
	case '{':
	case 0:
		_, err := p.dec.ReadToken()
		return syntaxError(err)
	default:
		return invalidField("stream_options", "stream_options must be an object")
	}
	if gerr := p.begin(); gerr != nil {
		return gerr
	}
	for p.dec.PeekKind() == '"' {
		name, gerr := p.name(streamOptionFields[:], "stream_options.")
		if gerr != nil {
			return gerr
		}
		if string(name) == "include_usage" {
			if _, gerr := p.readBool("stream_options.include_usage", &p.includeUsage); gerr != nil {
				return gerr
			}
			continue
		}
		if gerr := p.skip(nil); gerr != nil {
			return gerr
		}
	}
	return p.end()
}

var streamOptionFields = [...]string{"include_usage"}

// readPromptList captures a completions prompt or an embeddings input; when
// count is set it is the endpoint's batch and its entries are counted.
func (p *parser) readPromptList(param string, count bool) *gwerror.Error {
	if !count {
		return p.capture(param, nil)
	}
	kind := p.dec.PeekKind()
	var list listShape
	if gerr := p.capture(param, &list); gerr != nil {
		return gerr
	}
	switch kind {
	case '"', 'n':
		p.prompts = 1
		return nil
	case '[':
	default:
		return invalidField(param, "%s must be a string, an array of strings, an array of token ids or an array of token-id arrays", param)
	}
	n := list.len()
	switch {
	case n == 0:
		return invalidField(param, "%s must not be an empty array", param)
	case list.numbers == n:
		p.prompts = 1 // one prompt given as token ids
	case list.strings == n || list.arrays == n:
		p.prompts = n
	default:
		return invalidField(param, "%s must be a string, an array of strings, an array of token ids or an array of token-id arrays, not a mix", param)
	}
	if p.prompts > MaxPrompts {
		return invalidField(param, "%s holds %d entries; at most %d are accepted in one request", param, p.prompts, MaxPrompts)
	}
	return nil
}
