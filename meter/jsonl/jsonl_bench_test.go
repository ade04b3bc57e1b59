package jsonl

import (
	"path/filepath"
	"testing"

	"sluice/meter"
)

func BenchmarkAppend(b *testing.B) {
	for _, mode := range []meter.SyncMode{meter.SyncNone, meter.SyncInterval} {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "usage.jsonl"), Options{Sync: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := record("r1")
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Append(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendParallel: Append from 8*GOMAXPROCS goroutines at once (the
// request path of a busy gateway: many requests in flight per core).
func BenchmarkAppendParallel(b *testing.B) {
	for _, mode := range []meter.SyncMode{meter.SyncNone, meter.SyncInterval} {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "usage.jsonl"), Options{Sync: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				r := record("r1")
				for pb.Next() {
					if err := s.Append(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			st := s.Stats()
			b.ReportMetric(float64(st.Writes)/float64(st.Appended), "writes/append")
		})
	}
}
