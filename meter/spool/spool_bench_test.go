package spool

import (
	"testing"

	"sluice/meter"
)

// benchOptions: a bound no benchmark run reaches, so Append never drops.
func benchOptions(sync meter.SyncMode) Options {
	return Options{Sync: sync, MaxBytes: 8 << 30, SegmentBytes: 16 << 20}
}

var benchModes = []meter.SyncMode{meter.SyncNone, meter.SyncInterval, meter.SyncAlways}

// BenchmarkAppend: one record encoded, framed and written, from one
// goroutine, per sync mode.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range benchModes {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			s, err := Open(b.TempDir(), benchOptions(mode))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := record(1)
			b.SetBytes(int64(frameHeaderSize + len(r.AppendJSON(nil))))
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
	for _, mode := range benchModes {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			s, err := Open(b.TempDir(), benchOptions(mode))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				r := record(1)
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

// BenchmarkShip: the shipper's side, per record: Next(500) and Ack over a
// spool filled beforehand (sync interval: an Ack fsyncs the ack file).
func BenchmarkShip(b *testing.B) {
	s, err := Open(b.TempDir(), benchOptions(meter.SyncInterval))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := record(1)
	for range b.N {
		if err := s.Append(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		batch, err := s.Next(500)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ack(batch); err != nil {
			b.Fatal(err)
		}
		n += batch.Len()
	}
}
