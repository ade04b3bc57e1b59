package meter

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeBin is decodeBinary into a record of its own (its strings point
// into data, which the tests do not modify).
func decodeBin(data []byte) (Record, error) {
	var r Record
	err := decodeBinary(data, &r)
	return r, err
}

// binaryCases are records whose binary encoding must carry every field as
// the JSON encoding does.
func binaryCases() map[string]Record {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	return map[string]Record{
		"full":            fullRecord(),
		"minimal":         {ID: "r1", Time: ts, Resolution: AuthFailed},
		"status zero":     {ID: "r2", Time: ts, Resolution: Abandoned, Status: 0, LatencyMicros: 5},
		"before 1970":     {ID: "r3", Time: time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC), Resolution: Settled},
		"far future":      {ID: "r4", Time: time.Date(12000, 1, 1, 0, 0, 0, 1000, time.UTC), Resolution: Settled},
		"other zone":      {ID: "r5", Time: time.Date(2026, 6, 1, 12, 0, 0, 0, time.FixedZone("X", -7*3600)), Resolution: Closed},
		"negative values": {ID: "r6", Time: ts, Resolution: InternalError, PromptTokens: -1, CostMicroUSD: math.MinInt64, Status: -200, Attempts: -3},
		"large values":    {ID: "r7", Time: ts, Resolution: Settled, CompletionTokens: math.MaxInt64, Status: math.MaxInt32, Attempts: math.MaxInt32},
		"odd strings": {ID: "r8\x00\"\\", Time: ts, Resolution: Denied, RequestedModel: "bad \xff utf-8 \u2028 é",
			ServedModel: strings.Repeat("m", MaxModelBytes), DeniedBy: "token-based-ratelimit", ErrorCode: "a\nb"},
		"every usage source": {ID: "r9", Time: ts, Resolution: Settled, UsageSource: UsageCounted},
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	for name, rec := range binaryCases() {
		t.Run(name, func(t *testing.T) {
			bin := rec.AppendBinary(nil)
			got, err := decodeBin(bin)
			if err != nil {
				t.Fatalf("decodeBinary: %v", err)
			}
			want := rec
			want.Time = time.UnixMicro(rec.Time.UnixMicro()).UTC()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n %+v\nwant\n %+v", got, want)
			}
			js, err := AppendJSONFromBinary([]byte("prefix"), bin)
			if err != nil {
				t.Fatalf("AppendJSONFromBinary: %v", err)
			}
			if want := append([]byte("prefix"), rec.AppendJSON(nil)...); !bytes.Equal(js, want) {
				t.Errorf("JSON from the binary encoding\n %s\nwant\n %s", js, want)
			}
			if jl := len(rec.AppendJSON(nil)); name == "full" && len(bin)*2 > jl {
				t.Errorf("binary encoding of %d bytes against %d of JSON: not the compact one", len(bin), jl)
			}
		})
	}
}

// Every field of Record, set alone on a minimal record, reaches the JSON
// encoding through the binary one: a field added to Record and not to the
// binary encoding fails here.
func TestBinaryCarriesEveryField(t *testing.T) {
	base := Record{ID: "r1", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Resolution: Settled}
	typ := reflect.TypeFor[Record]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		rec := base
		v := reflect.ValueOf(&rec).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("value of " + f.Name)
		case reflect.Int, reflect.Int64:
			v.SetInt(1_000_003)
		case reflect.Uint8:
			v.SetUint(2)
		case reflect.Struct: // Time
			v.Set(reflect.ValueOf(time.Date(2030, 5, 6, 7, 8, 9, 10_000, time.UTC)))
		default:
			t.Fatalf("field %s of kind %s: extend this test", f.Name, v.Kind())
		}
		got, err := AppendJSONFromBinary(nil, rec.AppendBinary(nil))
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if want := rec.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: JSON from the binary encoding\n %s\nwant\n %s", f.Name, got, want)
		}
	}
}

func TestDecodeBinaryRefuses(t *testing.T) {
	good := fullRecord()
	bin := good.AppendBinary(nil)
	// Every proper prefix is truncated.
	for n := range len(bin) {
		if _, err := decodeBin(bin[:n]); err == nil {
			t.Errorf("a prefix of %d of %d bytes decoded", n, len(bin))
		}
	}
	withPresent := func(p uint32, rest []byte) []byte {
		return append(binary.LittleEndian.AppendUint32(nil, p), rest...)
	}
	minimal := Record{ID: "r1", Time: time.Unix(1, 0), Resolution: Settled}
	mb := minimal.AppendBinary(nil)
	fields := mb[4:]
	tests := map[string][]byte{
		"a byte after the fields": append(bin[:len(bin):len(bin)], 0),
		"unknown field":           withPresent(binRequired|1<<numBinFields, fields),
		"id missing":              withPresent(binRequired&^(1<<binID), fields[3:]),
		"empty id":                (&Record{Time: time.Unix(1, 0), Resolution: Settled}).AppendBinary(nil),
		"resolution unset":        (&Record{ID: "r1", Time: time.Unix(1, 0)}).AppendBinary(nil),
		"resolution unknown":      (&Record{ID: "r1", Time: time.Unix(1, 0), Resolution: numResolutions}).AppendBinary(nil),
		"usage source unknown":    (&Record{ID: "r1", Time: time.Unix(1, 0), Resolution: Settled, UsageSource: numUsageSources}).AppendBinary(nil),
		"string past the end":     withPresent(binRequired, []byte{200, 'r'}),
	}
	for name, data := range tests {
		if _, err := decodeBin(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
		if out, err := AppendJSONFromBinary([]byte("x"), data); err == nil || string(out) != "x" {
			t.Errorf("%s: AppendJSONFromBinary = %q, %v; want x and an error", name, out, err)
		}
	}
}

func TestBinaryDoesNotAllocate(t *testing.T) {
	r := fullRecord()
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendBinary(buf[:0]) }); n != 0 {
		t.Errorf("AppendBinary: %v allocations", n)
	}
	bin := r.AppendBinary(nil)
	out := make([]byte, 0, 2048)
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if out, err = AppendJSONFromBinary(out[:0], bin); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendJSONFromBinary: %v allocations", n)
	}
}

// FuzzDecodeBinary: no input panics, and whatever decodes gives the same
// JSON through both decoders and survives a round trip.
func FuzzDecodeBinary(f *testing.F) {
	for _, r := range binaryCases() {
		f.Add(r.AppendBinary(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeBin(data)
		js, jerr := AppendJSONFromBinary(nil, data)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("decodeBinary error %v, AppendJSONFromBinary error %v", err, jerr)
		}
		if err != nil {
			return
		}
		if want := rec.AppendJSON(nil); !bytes.Equal(js, want) {
			t.Fatalf("JSON %s, want %s", js, want)
		}
		again, err := decodeBin(rec.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, rec)
		}
		// RFC 3339, and so the JSON's ts, has four-digit years.
		if y := rec.Time.Year(); y >= 1 && y <= 9999 {
			if _, err := Decode(js); err != nil {
				t.Fatalf("the JSON does not decode: %v\n%s", err, js)
			}
		}
	})
}
