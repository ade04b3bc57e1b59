package spool

import (
	"testing"

	"sluice/internal/proctest"
	"sluice/meter"
)

// reportUsage reports the process's CPU time and minor faults per op since
// proctest.Usage returned cpu0 and faults0 (the syncer's goroutine
// included).
func reportUsage(b *testing.B, cpu0, faults0 int64) {
	cpu, faults := proctest.Usage()
	b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(faults-faults0)/float64(b.N), "faults/op")
}

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
			b.SetBytes(int64(frameHeaderSize + len(r.AppendBinary(nil))))
			b.ReportAllocs()
			cpu0, faults0 := proctest.Usage()
			for b.Loop() {
				if err := s.Append(r); err != nil {
					b.Fatal(err)
				}
			}
			reportUsage(b, cpu0, faults0)
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
			cpu0, faults0 := proctest.Usage()
			b.RunParallel(func(pb *testing.PB) {
				r := record(1)
				for pb.Next() {
					if err := s.Append(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportUsage(b, cpu0, faults0)
			st := s.Stats()
			b.ReportMetric(float64(st.Writes)/float64(st.Appended), "writes/append")
		})
	}
}

// BenchmarkShip: the shipper's side, per record: NextReusing(500), as
// meter/ship reads, and Ack over a spool filled beforehand (sync interval).
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
	var batch Batch
	for n := 0; n < b.N; {
		batch, err = s.NextReusing(batch, 500)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ack(batch); err != nil {
			b.Fatal(err)
		}
		n += batch.Len()
	}
}
