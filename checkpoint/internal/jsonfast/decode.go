// Package jsonfast is a fast path for decoding stored values: like
// encoding/json.Unmarshal, faster, for the shapes records have (structs with tagged fields, strings,
// numbers, booleans, slices, string-keyed maps, pointers).
//
// It is a fast path, never a second opinion: whenever it meets anything it
// does not handle exactly as encoding/json would (escaped strings, a key that
// only matches a field case-insensitively, a type with its own UnmarshalJSON,
// malformed input), it hands the value, or the whole document, to
// encoding/json, so results and errors are encoding/json's. A differential
// fuzz test (FuzzUnmarshalMatchesEncodingJSON) holds it to that.
//
// The speed comes from a decoder compiled once per type, from scanning the
// input once where encoding/json scans it twice (a validity pass, then the
// decoding pass), and from sharing repeated short strings between records.
package jsonfast

import (
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Unmarshal decodes data into v like encoding/json.Unmarshal. v must be a
// non-nil pointer to a zero value (the fast path does not merge into existing maps and slices the way
// encoding/json does, so it is only used on fresh values).
func Unmarshal(data []byte, v any) error {
	return (&Decoder{noIntern: true}).Unmarshal(data, v)
}

// Decoder decodes many values in a row and shares their short strings:
// records of one kind repeat the same pool, driver and request names, and
// one string for all of them saves an allocation each and memory for as
// long as the values live. A Decoder is not safe for concurrent use; its
// zero value is ready.
type Decoder struct {
	intern   map[string]string
	noIntern bool // one-off decodes: a table would cost more than it saves
}

// internMaxEntries bounds the table, so that unique strings (UIDs, names) cannot
// make it grow without limit; the common strings come early and stay.
const (
	internMaxEntries = 4096
	internMaxLen     = 32
)

// unmarshal is Unmarshal with the decoder's string table.
func (dec *Decoder) Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return json.Unmarshal(data, v)
	}
	fn := decoderFor(rv.Type().Elem())
	if fn == nil {
		return json.Unmarshal(data, v)
	}
	if dec.intern == nil && !dec.noIntern {
		dec.intern = make(map[string]string)
	}
	d := jsonScan{data: data, intern: dec.intern}
	err := fn(&d, rv.Elem())
	if err == nil {
		d.skipSpace()
		if d.pos != len(d.data) {
			err = errFallback
		}
	}
	if err != nil {
		// encoding/json gives the authoritative result or error. Reset
		// first so nothing the fast path set survives.
		rv.Elem().SetZero()
		return json.Unmarshal(data, v)
	}
	return nil
}

// errFallback means: let encoding/json decode this document.
var errFallback = errors.New("checkpoint: JSON not handled by the fast path")

const maxJSONDepth = 10000 // encoding/json's nesting limit

type jsonScan struct {
	data   []byte
	pos    int
	depth  int
	intern map[string]string
}

// str returns b as a string, shared with earlier equal short strings.
func (d *jsonScan) str(b []byte) string {
	if d.intern == nil || len(b) > internMaxLen {
		return string(b)
	}
	if s, ok := d.intern[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if len(d.intern) < internMaxEntries {
		d.intern[s] = s
	}
	return s
}

type jsonDecodeFunc func(d *jsonScan, v reflect.Value) error

var jsonDecoders sync.Map // reflect.Type -> cachedDecoder (nil entry: unsupported)

type cachedDecoder struct{ f jsonDecodeFunc }

func decoderFor(t reflect.Type) jsonDecodeFunc {
	if c, ok := jsonDecoders.Load(t); ok {
		return c.(cachedDecoder).f
	}
	b := jsonBuilder{inProgress: map[reflect.Type]*jsonDecodeFunc{}}
	f := b.build(t)
	if b.unsupported {
		f = nil
	}
	jsonDecoders.Store(t, cachedDecoder{f})
	return f
}

type jsonBuilder struct {
	inProgress  map[reflect.Type]*jsonDecodeFunc // for recursive types
	unsupported bool
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (b *jsonBuilder) build(t reflect.Type) jsonDecodeFunc {
	if p, ok := b.inProgress[t]; ok {
		return func(d *jsonScan, v reflect.Value) error { return (*p)(d, v) }
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) ||
		t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) {
		return delegateToJSON
	}
	slot := new(jsonDecodeFunc)
	b.inProgress[t] = slot
	var f jsonDecodeFunc
	switch t.Kind() {
	case reflect.Bool:
		f = scanBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f = scanInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		f = scanUint
	case reflect.Float32, reflect.Float64:
		f = scanFloat
	case reflect.String:
		f = scanString
	case reflect.Interface:
		f = delegateToJSON
	case reflect.Pointer:
		f = b.pointer(t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			f = delegateToJSON // base64, and the rules for named byte types
		} else {
			f = b.slice(t)
		}
	case reflect.Map:
		f = b.mapOf(t)
	case reflect.Struct:
		f = b.structOf(t)
	default:
		b.unsupported = true // arrays, channels, funcs, complex: rare in records
		f = delegateToJSON
	}
	*slot = f
	delete(b.inProgress, t)
	return f
}

// delegate hands one value to encoding/json. v must be addressable.
func delegateToJSON(d *jsonScan, v reflect.Value) error {
	start := d.pos
	if err := d.skipValue(); err != nil {
		return err
	}
	return json.Unmarshal(d.data[start:d.pos], v.Addr().Interface())
}

func (b *jsonBuilder) pointer(t reflect.Type) jsonDecodeFunc {
	elem := b.build(t.Elem())
	return func(d *jsonScan, v reflect.Value) error {
		if d.null() {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return elem(d, v.Elem())
	}
}

func (b *jsonBuilder) slice(t reflect.Type) jsonDecodeFunc {
	elem := b.build(t.Elem())
	return func(d *jsonScan, v reflect.Value) error {
		if d.null() {
			v.SetZero()
			return nil
		}
		if !d.consume('[') {
			return errFallback
		}
		if err := d.enter(); err != nil {
			return err
		}
		// Like encoding/json: decode into the existing backing array
		// (a repeated key reuses it), growing as needed.
		i := 0
		if !d.consume(']') {
			for ; ; i++ {
				if i >= v.Cap() {
					v.Grow(1)
				}
				if i >= v.Len() {
					v.SetLen(i + 1)
				}
				if err := elem(d, v.Index(i)); err != nil {
					return err
				}
				if d.consume(',') {
					continue
				}
				if d.consume(']') {
					i++
					break
				}
				return errFallback
			}
		}
		if i < v.Len() {
			v.SetLen(i)
		}
		if i == 0 {
			v.Set(reflect.MakeSlice(t, 0, 0))
		}
		d.depth--
		return nil
	}
}

func (b *jsonBuilder) mapOf(t reflect.Type) jsonDecodeFunc {
	kt := t.Key()
	if kt.Kind() != reflect.String || reflect.PointerTo(kt).Implements(textUnmarshaler) || kt.Implements(textUnmarshaler) {
		b.unsupported = true
		return delegateToJSON
	}
	elem := b.build(t.Elem())
	return func(d *jsonScan, v reflect.Value) error {
		if d.null() {
			v.SetZero()
			return nil
		}
		if !d.consume('{') {
			return errFallback
		}
		if err := d.enter(); err != nil {
			return err
		}
		// Like encoding/json: a repeated key merges into the map.
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		m := v
		if !d.consume('}') {
			// SetMapIndex copies key and element, so one of each
			// serves every entry (encoding/json reuses them too).
			kv := reflect.New(kt).Elem()
			ev := reflect.New(t.Elem()).Elem()
			for {
				key, err := d.key()
				if err != nil {
					return err
				}
				ev.SetZero()
				if err := elem(d, ev); err != nil {
					return err
				}
				kv.SetString(key)
				m.SetMapIndex(kv, ev)
				if d.consume(',') {
					continue
				}
				if d.consume('}') {
					break
				}
				return errFallback
			}
		}
		d.depth--
		return nil
	}
}

type jsonField struct {
	name  string
	index int
	dec   jsonDecodeFunc
}

func (b *jsonBuilder) structOf(t reflect.Type) jsonDecodeFunc {
	var jsonFields []jsonField
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		if sf.Anonymous || !sf.IsExported() {
			// Embedded structs promote fields; unexported embedded
			// structs too. Not worth mirroring.
			if sf.Anonymous {
				b.unsupported = true
			}
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			b.unsupported = true
			continue
		}
		if name == "" || !validJSONTagName(name) {
			name = sf.Name
		}
		jsonFields = append(jsonFields, jsonField{name: name, index: i})
	}
	for i := range jsonFields {
		for k := range i {
			if strings.EqualFold(jsonFields[i].name, jsonFields[k].name) {
				b.unsupported = true // encoding/json's conflict rules
			}
		}
	}
	for i := range jsonFields {
		jsonFields[i].dec = b.build(t.Field(jsonFields[i].index).Type)
	}
	byName := make(map[string]*jsonField, len(jsonFields))
	for i := range jsonFields {
		byName[jsonFields[i].name] = &jsonFields[i]
	}
	return func(d *jsonScan, v reflect.Value) error {
		if d.null() {
			return nil
		}
		if !d.consume('{') {
			return errFallback
		}
		if err := d.enter(); err != nil {
			return err
		}
		if d.consume('}') {
			d.depth--
			return nil
		}
		for {
			key, err := d.keyBytes()
			if err != nil {
				return err
			}
			f := byName[string(key)] // no allocation for the lookup
			if f == nil {
				for i := range jsonFields {
					if strings.EqualFold(jsonFields[i].name, string(key)) {
						return errFallback // encoding/json would fill it
					}
				}
				if err := d.skipValue(); err != nil {
					return err
				}
			} else if err := f.dec(d, v.Field(f.index)); err != nil {
				return err
			}
			if d.consume(',') {
				continue
			}
			if d.consume('}') {
				break
			}
			return errFallback
		}
		d.depth--
		return nil
	}
}

// validTagName mirrors the characters encoding/json accepts in a tag name.
func validJSONTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

func (d *jsonScan) enter() error {
	d.depth++
	if d.depth > maxJSONDepth {
		return errFallback
	}
	return nil
}

func (d *jsonScan) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, if c is next.
func (d *jsonScan) consume(c byte) bool {
	if d.pos < len(d.data) && d.data[d.pos] == c { // compact JSON: no space
		d.pos++
		return true
	}
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *jsonScan) literal(lit string) bool {
	d.skipSpace()
	if len(d.data)-d.pos >= len(lit) && string(d.data[d.pos:d.pos+len(lit)]) == lit {
		d.pos += len(lit)
		return true
	}
	return false
}

func (d *jsonScan) null() bool {
	if d.pos < len(d.data) && d.data[d.pos] != 'n' && d.data[d.pos] > ' ' {
		return false // the common case, without the literal comparison
	}
	return d.literal("null")
}

// keyBytes reads an object key and the colon after it. The returned slice
// aliases the input or a scratch buffer; copy it to keep it.
func (d *jsonScan) keyBytes() ([]byte, error) {
	d.skipSpace()
	s, err := d.stringBytes()
	if err != nil {
		return nil, err
	}
	if !d.consume(':') {
		return nil, errFallback
	}
	return s, nil
}

func (d *jsonScan) key() (string, error) {
	b, err := d.keyBytes()
	return d.str(b), err
}

// stringBytes reads a string token. Strings with escapes, control
// characters or non-ASCII bytes go through encoding/json, which knows every
// rule (surrogates, invalid UTF-8 replacement).
func (d *jsonScan) stringBytes() ([]byte, error) {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return nil, errFallback
	}
	start := d.pos + 1
	for i := start; i < len(d.data); i++ {
		c := d.data[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return d.data[start:i], nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return d.slowString(start - 1)
		}
	}
	return nil, errFallback
}

func (d *jsonScan) slowString(open int) ([]byte, error) {
	d.pos = open
	if err := d.skipString(); err != nil {
		return nil, err
	}
	var s string
	if err := json.Unmarshal(d.data[open:d.pos], &s); err != nil {
		return nil, errFallback
	}
	return []byte(s), nil
}

func scanString(d *jsonScan, v reflect.Value) error {
	if d.null() {
		return nil
	}
	d.skipSpace()
	b, err := d.stringBytes()
	if err != nil {
		return err
	}
	v.SetString(d.str(b))
	return nil
}

func scanBool(d *jsonScan, v reflect.Value) error {
	switch {
	case d.literal("true"):
		v.SetBool(true)
	case d.literal("false"):
		v.SetBool(false)
	case d.null():
	default:
		return errFallback
	}
	return nil
}

// number reads a token that is exactly a JSON number.
func (d *jsonScan) number() (string, error) {
	d.skipSpace()
	start, i, n := d.pos, d.pos, len(d.data)
	if i < n && d.data[i] == '-' {
		i++
	}
	switch {
	case i < n && d.data[i] == '0':
		i++
	case i < n && '1' <= d.data[i] && d.data[i] <= '9':
		for i < n && '0' <= d.data[i] && d.data[i] <= '9' {
			i++
		}
	default:
		return "", errFallback
	}
	if i < n && d.data[i] == '.' {
		i++
		if i >= n || d.data[i] < '0' || d.data[i] > '9' {
			return "", errFallback
		}
		for i < n && '0' <= d.data[i] && d.data[i] <= '9' {
			i++
		}
	}
	if i < n && (d.data[i] == 'e' || d.data[i] == 'E') {
		i++
		if i < n && (d.data[i] == '+' || d.data[i] == '-') {
			i++
		}
		if i >= n || d.data[i] < '0' || d.data[i] > '9' {
			return "", errFallback
		}
		for i < n && '0' <= d.data[i] && d.data[i] <= '9' {
			i++
		}
	}
	d.pos = i
	return string(d.data[start:i]), nil
}

func scanInt(d *jsonScan, v reflect.Value) error {
	if d.null() {
		return nil
	}
	s, err := d.number()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(s, 10, v.Type().Bits())
	if err != nil {
		return errFallback
	}
	v.SetInt(n)
	return nil
}

func scanUint(d *jsonScan, v reflect.Value) error {
	if d.null() {
		return nil
	}
	s, err := d.number()
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(s, 10, v.Type().Bits())
	if err != nil {
		return errFallback
	}
	v.SetUint(n)
	return nil
}

func scanFloat(d *jsonScan, v reflect.Value) error {
	if d.null() {
		return nil
	}
	s, err := d.number()
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(s, v.Type().Bits())
	if err != nil {
		return errFallback
	}
	v.SetFloat(f)
	return nil
}

// skipValue moves past one JSON value, checking its syntax.
func (d *jsonScan) skipValue() error {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return errFallback
	}
	switch c := d.data[d.pos]; {
	case c == '"':
		return d.skipString()
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.pos++
		if err := d.enter(); err != nil {
			return err
		}
		if d.consume(end) {
			d.depth--
			return nil
		}
		for {
			if c == '{' {
				d.skipSpace()
				if err := d.skipString(); err != nil {
					return err
				}
				if !d.consume(':') {
					return errFallback
				}
			}
			if err := d.skipValue(); err != nil {
				return err
			}
			if d.consume(',') {
				continue
			}
			if d.consume(end) {
				d.depth--
				return nil
			}
			return errFallback
		}
	case c == 't':
		return d.expect("true")
	case c == 'f':
		return d.expect("false")
	case c == 'n':
		return d.expect("null")
	default:
		_, err := d.number()
		return err
	}
}

func (d *jsonScan) expect(lit string) error {
	if !d.literal(lit) {
		return errFallback
	}
	return nil
}

// skipString moves past a string token, checking escapes and control
// characters (UTF-8 validity is not a syntax matter in encoding/json).
func (d *jsonScan) skipString() error {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return errFallback
	}
	for i := d.pos + 1; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			d.pos = i + 1
			return nil
		case c < 0x20:
			return errFallback
		case c == '\\':
			i++
			if i >= len(d.data) {
				return errFallback
			}
			switch d.data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d.data) {
					return errFallback
				}
				for _, h := range d.data[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return errFallback
					}
				}
				i += 4
			default:
				return errFallback
			}
		}
	}
	return errFallback
}
