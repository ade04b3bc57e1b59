package redisstore

import "strings"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of the first non-empty {hash tag} in it, modulo 16384.
func Slot(key string) int { return slotOf("", key) }

// slotOf is Slot(prefix + key) without building the string (the store
// checks every key of a call on Cluster).
func slotOf(prefix, key string) int {
	if strings.IndexByte(prefix, '{') >= 0 {
		return slotOf("", prefix+key)
	}
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return int(crc16(0, key[i+1:i+1+j]) % 16384)
		}
	}
	return int(crc16(crc16(0, prefix), key) % 16384)
}

// crc16 continues CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster uses for key slots, from crc over s.
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
