package meter

import "time"

// appendRFC3339Fixed appends t in its location as RFC 3339 with exactly
// digits (1 to 9) fractional digits, truncated, and the offset as "Z" or
// ±hh:mm: what t.AppendFormat does with the layout
// "2006-01-02T15:04:05.000Z07:00" (as many zeros as digits), without
// parsing the layout. Years outside 0-9999 go through AppendFormat.
func appendRFC3339Fixed(dst []byte, t time.Time, digits int) []byte {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, "2006-01-02T15:04:05."+"000000000"[:digits]+"Z07:00")
	}
	hh, mm, ss := t.Clock()
	dst = append(dst,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hh/10), byte('0'+hh%10), ':',
		byte('0'+mm/10), byte('0'+mm%10), ':',
		byte('0'+ss/10), byte('0'+ss%10), '.')
	frac := t.Nanosecond()
	for i := digits; i < 9; i++ {
		frac /= 10
	}
	n := len(dst)
	for range digits {
		dst = append(dst, '0')
	}
	for i := len(dst) - 1; i >= n; i-- {
		dst[i] = byte('0' + frac%10)
		frac /= 10
	}
	_, off := t.Zone()
	if off == 0 {
		return append(dst, 'Z')
	}
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	oh, om := off/3600, off/60%60
	return append(dst, sign, byte('0'+oh/10), byte('0'+oh%10), ':', byte('0'+om/10), byte('0'+om%10))
}
