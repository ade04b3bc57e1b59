package tokencount

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The rank files hold the vocabularies of github.com/tiktoken-go/tokenizer,
// written by TestRankFilesMatchLibrary with -update (`go generate`), which
// also checks on every test run that they still equal the library's. Reading
// them instead of the library keeps its vocabulary maps out of the process:
// about 11 MiB of map entries holding pointers, which the garbage collector
// would scan on every cycle (about 3 ms of CPU a cycle, measured: a few
// microseconds of CPU per gateway request at load), for tables that are read
// once.
//
// Format: a gzip stream of tokens in increasing rank, each written as
// uvarint(rank - previous rank - 1) (the first: rank itself), uvarint(length),
// then its bytes.
//
//go:generate go test -run ^TestRankFilesMatchLibrary$ -update .

var (
	//go:embed ranks/o200k_base.gz
	o200kRanks []byte
	//go:embed ranks/cl100k_base.gz
	cl100kRanks []byte
)

var rankFiles = [numEncodings][]byte{o200k: o200kRanks, cl100k: cl100kRanks}

// maxTokenLen bounds a token's length in a rank file; the longest of both
// vocabularies has 256 bytes.
const maxTokenLen = 1 << 12

// appendRankRecord appends one token of a rank file's uncompressed stream.
func appendRankRecord(dst []byte, gap uint32, token string) []byte {
	dst = binary.AppendUvarint(dst, uint64(gap))
	dst = binary.AppendUvarint(dst, uint64(len(token)))
	return append(dst, token...)
}

// decodeRanks builds the rank table of one rank file.
func decodeRanks(file []byte) (*rankTable, error) {
	zr, err := gzip.NewReader(bytes.NewReader(file))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var (
		blob  = make([]byte, 0, len(raw))
		slots []rankSlot
		next  uint64 // the rank a gap of 0 gives
	)
	for len(raw) > 0 {
		gap, n := binary.Uvarint(raw)
		if n <= 0 {
			return nil, fmt.Errorf("token %d: bad rank gap", len(slots))
		}
		raw = raw[n:]
		size, n := binary.Uvarint(raw)
		if n <= 0 || size == 0 || size > maxTokenLen || size > uint64(len(raw)-n) {
			return nil, fmt.Errorf("token %d: bad length", len(slots))
		}
		raw = raw[n:]
		rank := next + gap
		if rank >= noRank {
			return nil, fmt.Errorf("token %d: rank out of range", len(slots))
		}
		slots = append(slots, rankSlot{off: uint32(len(blob)), len: uint32(size), rank: uint32(rank)})
		blob = append(blob, raw[:size]...)
		raw = raw[size:]
		next = rank + 1
	}
	if len(slots) == 0 {
		return nil, errors.New("no token")
	}
	return newRankTable(blob, slots), nil
}
