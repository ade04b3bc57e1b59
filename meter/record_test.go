package meter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fullRecord has every field set, so its encoding holds every field name.
func fullRecord() Record {
	return Record{
		ID:               "5f2c9a1be04d-0000002a",
		ClientRequestID:  "client-trace-77",
		Time:             time.Date(2026, 12, 1, 9, 30, 15, 123456789, time.FixedZone("CET", 3600)),
		GatewayID:        "gw-eu-1",
		Route:            "openai-prod",
		Provider:         "openai",
		Application:      "app-a",
		KeyID:            "key_7f3a",
		RequestedModel:   "gpt-5-mini",
		ServedModel:      "gpt-5-mini-2025-08-07",
		PromptTokens:     1200,
		CachedTokens:     1024,
		CacheWriteTokens: 64,
		CompletionTokens: 350,
		ReasoningTokens:  128,
		UsageSource:      UsageProvider,
		CostMicroUSD:     1234,
		PriceVersion:     "2026-11-30",
		Resolution:       Denied,
		DeniedBy:         "token-based-ratelimit",
		ErrorCode:        "rate_limit_exceeded",
		Status:           429,
		LatencyMicros:    1_250_000,
		TTFTMicros:       310_000,
		Attempts:         2,
	}
}

func TestAppendJSON(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	tests := []struct {
		name string
		rec  Record
		want string
	}{
		{
			name: "minimal: only the always-present fields",
			rec:  Record{ID: "r1", Time: ts, Resolution: AuthFailed},
			want: `{"v":1,"id":"r1","ts":"2026-01-02T03:04:05.000006Z","resolution":"auth_failed","status":0}`,
		},
		{
			name: "time converted to UTC and cut to the microsecond",
			rec:  Record{ID: "r2", Time: time.Date(2026, 1, 2, 4, 4, 5, 6999, time.FixedZone("", 3600)), Resolution: Settled, Status: 200},
			want: `{"v":1,"id":"r2","ts":"2026-01-02T03:04:05.000006Z","resolution":"settled","status":200}`,
		},
		{
			name: "settled stream",
			rec: Record{ID: "r3", Time: ts, Route: "r", Provider: "p", Application: "a", RequestedModel: "m",
				PromptTokens: 10, CompletionTokens: 5, UsageSource: UsageProvider, CostMicroUSD: 7, PriceVersion: "2026-11-30",
				Resolution: Settled, Status: 200, LatencyMicros: 900, TTFTMicros: 100, Attempts: 1},
			want: `{"v":1,"id":"r3","ts":"2026-01-02T03:04:05.000006Z","route":"r","provider":"p","application":"a",` +
				`"requested_model":"m","prompt_tokens":10,"completion_tokens":5,"usage_source":"provider","cost_micro_usd":7,` +
				`"price_version":"2026-11-30","resolution":"settled","status":200,"latency_us":900,"ttft_us":100,"attempts":1}`,
		},
		{
			name: "strings escaped",
			rec:  Record{ID: "a\"b\\c\n\x01<&>", Time: ts, RequestedModel: "é\u2028\xff", Resolution: Denied},
			want: `{"v":1,"id":"a\"b\\c\n\u0001<&>","ts":"2026-01-02T03:04:05.000006Z","requested_model":"é\u2028\ufffd","resolution":"denied","status":0}`,
		},
		{
			name: "negative numbers kept (a refund-style correction is not dropped)",
			rec:  Record{ID: "r4", Time: ts, CostMicroUSD: -5, Resolution: Closed},
			want: `{"v":1,"id":"r4","ts":"2026-01-02T03:04:05.000006Z","cost_micro_usd":-5,"resolution":"closed","status":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tt.rec.AppendJSON(nil))
			if got != tt.want {
				t.Errorf("AppendJSON:\n got %s\nwant %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("not valid JSON: %s", got)
			}
			m, err := tt.rec.MarshalJSON()
			if err != nil || string(m) != got {
				t.Errorf("MarshalJSON = %s, %v; want AppendJSON's", m, err)
			}
		})
	}
}

// TestAppendJSONAgreesWithEncodingJSON: the hand-written encoder and
// encoding/json reading the struct tags produce the same object (same names,
// same values), so the tags Decode uses and the encoder cannot drift.
func TestAppendJSONAgreesWithEncodingJSON(t *testing.T) {
	recs := []Record{fullRecord(), {ID: "x", Time: time.Unix(0, 0), Resolution: Released}}
	for _, r := range recs {
		std, err := json.Marshal(wireRecord{V: Version, plainRecord: plainRecord(r)})
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(r.AppendJSON(nil), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(std, &b); err != nil {
			t.Fatal(err)
		}
		for _, m := range []map[string]any{a, b} {
			tm, err := time.Parse(time.RFC3339Nano, m["ts"].(string))
			if err != nil {
				t.Fatal(err)
			}
			m["ts"] = tm.Truncate(time.Microsecond).UTC().String()
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("AppendJSON and encoding/json differ:\n%v\n%v", a, b)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	for _, res := range Resolutions() {
		r := fullRecord()
		r.Resolution = res
		got, err := Decode(r.AppendJSON(nil))
		if err != nil {
			t.Fatalf("%v: %v", res, err)
		}
		want := r
		want.Time = r.Time.Truncate(time.Microsecond).UTC()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip of %v:\n got %+v\nwant %+v", res, got, want)
		}
	}
	for s := UsageNone; s < numUsageSources; s++ {
		r := Record{ID: "u", Time: time.Unix(1, 0).UTC(), Resolution: Closed, UsageSource: s}
		got, err := Decode(r.AppendJSON(nil))
		if err != nil || got.UsageSource != s {
			t.Errorf("usage source %v: got %v, %v", s, got.UsageSource, err)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name, in, want string
		newer          bool
	}{
		{name: "newer version", in: `{"v":2,"id":"a","ts":"2026-01-02T03:04:05Z","resolution":"settled","status":200}`, want: "newer", newer: true},
		{name: "version zero", in: `{"id":"a","ts":"2026-01-02T03:04:05Z","resolution":"settled","status":200}`, want: "v 0"},
		{name: "unknown field", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","prompt":"hello","resolution":"settled","status":200}`, want: `unknown field "prompt"`},
		{name: "unknown resolution", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","resolution":"maybe","status":200}`, want: `unknown resolution "maybe"`},
		{name: "unset resolution", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","resolution":"unset","status":200}`, want: `unknown resolution "unset"`},
		{name: "unknown usage source", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","usage_source":"guess","resolution":"settled","status":200}`, want: `unknown usage source`},
		{name: "missing id", in: `{"v":1,"ts":"2026-01-02T03:04:05Z","resolution":"settled","status":200}`, want: "id is empty"},
		{name: "missing ts", in: `{"v":1,"id":"a","resolution":"settled","status":200}`, want: "ts is missing"},
		{name: "missing resolution", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","status":200}`, want: "resolution is missing"},
		{name: "two objects", in: `{"v":1,"id":"a","ts":"2026-01-02T03:04:05Z","resolution":"settled","status":200}{}`, want: "data after"},
		{name: "not JSON", in: `{"v":1,`, want: "decoding record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode(%s) error = %v, want one containing %q", tt.in, err, tt.want)
			}
			if got := errors.Is(err, ErrNewerVersion); got != tt.newer {
				t.Errorf("errors.Is(ErrNewerVersion) = %v, want %v", got, tt.newer)
			}
		})
	}
}

// TestAppendJSONDoesNotAllocate: with room in dst, encoding a record costs no
// allocation (the request path appends one per request).
func TestAppendJSONDoesNotAllocate(t *testing.T) {
	r := fullRecord()
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON allocates %v times per record, want 0", n)
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range stringSamples {
		checkAppendString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringSamples {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

var stringSamples = []string{
	"", "plain", `"quoted"`, `back\slash`, "tab\tnl\ncr\r", "\b\f\x00\x1f\x7f",
	"<script>&amp;</script>", "ünïcødé 日本語 🙂", "\u2028\u2029", "bad \xff\xfe utf8", "\xed\xa0\x80", "trailing \xe2\x82",
}

// checkAppendString: appendJSONString's bytes equal encoding/json's with HTML
// escaping off.
func checkAppendString(t *testing.T, s string) {
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	got := appendJSONString(nil, s, false)
	if string(got) != strings.TrimSuffix(want.String(), "\n") {
		t.Errorf("appendJSONString(%q) = %s, encoding/json: %s", s, got, want.String())
	}
}

func TestParseSyncMode(t *testing.T) {
	tests := []struct {
		in      string
		want    SyncMode
		wantErr bool
	}{
		{"", SyncInterval, false},
		{"interval", SyncInterval, false},
		{"none", SyncNone, false},
		{"always", SyncAlways, false},
		{"Always", 0, true},
		{"fsync", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSyncMode(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ParseSyncMode(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		name := tt.in
		if name == "" {
			name = "interval"
		}
		if err == nil && got.String() != name {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), name)
		}
	}
}

// TestDocumentedFields: the encoding of a record with every field set has
// exactly the fields docs/meter.md lists, and every resolution and usage
// source is documented there. A field that could carry prompt or completion
// text would have to be added here and in the docs first.
func TestDocumentedFields(t *testing.T) {
	doc := docSection(t, "Fields")
	documented := tableNames(doc)
	r := fullRecord()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.AppendJSON(nil), &m); err != nil {
		t.Fatal(err)
	}
	var encoded []string
	for k := range m {
		encoded = append(encoded, k)
	}
	slices.Sort(encoded)
	slices.Sort(documented)
	if !slices.Equal(encoded, documented) {
		t.Errorf("record fields differ from docs/meter.md:\nencoded    %v\ndocumented %v", encoded, documented)
	}

	var names []string
	for _, res := range Resolutions() {
		names = append(names, res.String())
	}
	if got := tableNames(docSection(t, "Resolutions")); !slices.Equal(got, names) {
		t.Errorf("docs/meter.md resolutions %v, want %v (declaration order)", got, names)
	}
	names = names[:0]
	for s := UsageNone; s < numUsageSources; s++ {
		names = append(names, s.String())
	}
	if got := tableNames(docSection(t, "Usage sources")); !slices.Equal(got, names) {
		t.Errorf("docs/meter.md usage sources %v, want %v", got, names)
	}
}

// docSection returns the lines of docs/meter.md under the "## <title>"
// heading, up to the next "## ".
func docSection(t *testing.T, title string) []string {
	t.Helper()
	f, err := os.Open("../docs/meter.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimPrefix(line, "## ") == title
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("docs/meter.md has no section %q", title)
	}
	return out
}

var tableName = regexp.MustCompile("^\\| `([a-z_0-9]+)` \\|")

// tableNames returns the first-column names of a markdown table's rows.
func tableNames(lines []string) []string {
	var out []string
	for _, l := range lines {
		if m := tableName.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// TestEscapeScanAtEveryOffset: a byte that needs escaping or quoting is
// found wherever it stands in a long value (the scan reads eight bytes at
// a time): every byte value at every offset of a 19-byte string.
func TestEscapeScanAtEveryOffset(t *testing.T) {
	for c := range 256 {
		for at := range 19 {
			b := []byte(strings.Repeat("a", 19))
			b[at] = byte(c)
			s := string(b)
			checkAppendString(t, s)
			if got, want := needsQuoting(s), quotesByteWise(s); got != want {
				t.Errorf("needsQuoting(%q) = %v, want %v", s, got, want)
			}
		}
	}
}

// quotesByteWise is needsQuoting one byte at a time, for a string whose only
// non-ASCII content is single bytes (invalid UTF-8 is quoted).
func quotesByteWise(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b == ' ' || b == '=' || b == '"' || b >= 0x80 {
			return true
		}
	}
	return s == ""
}

func TestCutModel(t *testing.T) {
	long := strings.Repeat("m", MaxModelBytes)
	tests := []struct{ name, in, want string }{
		{"short", "gpt-5-mini", "gpt-5-mini"},
		{"at the bound", long, long},
		{"over the bound", long + "xyz", long},
		// "é" is two bytes: it would straddle the bound, so it goes whole.
		{"a character across the bound", long[:MaxModelBytes-1] + "é", long[:MaxModelBytes-1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CutModel(tt.in)
			if got != tt.want || !utf8.ValidString(got) {
				t.Errorf("CutModel: %d bytes %q..., want %d bytes", len(got), got[:min(len(got), 8)], len(tt.want))
			}
		})
	}
}
