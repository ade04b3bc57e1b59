package meter

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// appendJSONString appends s as a JSON string. Control characters, '"' and
// '\\' are escaped, invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029 are
// escaped (as encoding/json does, so a line of records is also valid
// JavaScript); <, > and & are left as they are. slog escapes \b and \f as
// log/slog's JSONHandler does (\u0008, \u000c) rather than as
// encoding/json does (\b, \f).
func appendJSONString(dst []byte, s string, slog bool) []byte {
	dst = append(dst, '"')
	start := 0
	i := 0
	// Most values (ids, names, models) need no escape: eight bytes at a
	// time while none of them does.
	for i+8 <= len(s) && !swarHas(load8(s, i), 0x20, '"', '\\') {
		i += 8
	}
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b', '\f':
				if slog {
					dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				} else if c == '\b' {
					dst = append(dst, '\\', 'b')
				} else {
					dst = append(dst, '\\', 'f')
				}
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// needsQuoting reports whether log/slog's TextHandler quotes the string
// value s: empty, or holding a space, '=', '"', an ASCII control character,
// invalid UTF-8, or a rune that is a space or not printable.
func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	i := 0
	for i+8 <= len(s) && !swarHas(load8(s, i), 0x21, '=', '"') {
		i += 8
	}
	for i < len(s) {
		b := s[i]
		if b < utf8.RuneSelf {
			if b < 0x20 || b == ' ' || b == '=' || b == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// appendQuote appends s quoted as strconv.Quote does.
func appendQuote(dst []byte, s string) []byte { return strconv.AppendQuote(dst, s) }

// load8 returns the eight bytes of s from i as a little-endian word.
func load8(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// swarHas reports whether a byte of w is below less (at most 0x80), is a
// or b, or is not ASCII. It never misses such a byte; the callers then look
// at the bytes one by one, so a false report would cost time only (the
// tests compare both paths).
func swarHas(w uint64, less, a, b byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	lt := (w - ones*uint64(less)) &^ w
	xa := w ^ ones*uint64(a)
	xb := w ^ ones*uint64(b)
	return (lt|(xa-ones)&^xa|(xb-ones)&^xb|w)&highs != 0
}
