package meter

import (
	"encoding/json"
	"testing"
)

// BenchmarkEncode: one record's JSON encoding, the hand-written append
// encoder against encoding/json on the same struct tags.
func BenchmarkEncode(b *testing.B) {
	r := fullRecord()
	b.Run("AppendJSON", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendJSON(buf[:0])
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("AppendBinary", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendBinary(buf[:0])
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding_json", func(b *testing.B) {
		w := wireRecord{V: Version, plainRecord: plainRecord(r)}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&w); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecode: what the platform pays per record it ingests, and what
// the gateway's shipper pays to turn a spooled record into JSON.
func BenchmarkDecode(b *testing.B) {
	r := fullRecord()
	b.Run("Decode", func(b *testing.B) {
		data := r.AppendJSON(nil)
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSONFromBinary", func(b *testing.B) {
		bin := r.AppendBinary(nil)
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		b.SetBytes(int64(len(bin)))
		for b.Loop() {
			var err error
			if buf, err = AppendJSONFromBinary(buf[:0], bin); err != nil {
				b.Fatal(err)
			}
		}
	})
}
