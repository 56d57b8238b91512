// Package budgetline is what scripts/budget and scripts/test-summary share:
// sizes as the Makefile's budgets write them (4GiB, 512MiB), and the line
// in which scripts/budget reports a test binary's peaks, which test-summary
// folds into the package's line.
package budgetline

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// ParseSize reads a size: a number and a binary unit, B, KiB, MiB or GiB
// (K, M, G and KB, MB, GB mean the same); 0 alone is none.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number and a unit (512MiB, 4GiB)", s)
	}
	var m int64
	switch strings.ToUpper(unit) {
	case "", "B":
		m = 1
		if unit == "" && f != 0 {
			return 0, fmt.Errorf("size %q: no unit (B, KiB, MiB, GiB)", s)
		}
	case "K", "KB", "KIB":
		m = kib
	case "M", "MB", "MIB":
		m = mib
	case "G", "GB", "GIB":
		m = gib
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (B, KiB, MiB, GiB)", s, unit)
	}
	return int64(f * float64(m)), nil
}

// FormatSize writes n in the largest unit it fills, to a tenth (1.5GiB,
// 301.2MiB; 4GiB when whole).
func FormatSize(n int64) string {
	unit, m := "B", int64(1)
	switch {
	case n >= gib:
		unit, m = "GiB", gib
	case n >= mib:
		unit, m = "MiB", mib
	case n >= kib:
		unit, m = "KiB", kib
	}
	if n%m == 0 {
		return fmt.Sprintf("%d%s", n/m, unit)
	}
	return strconv.FormatFloat(float64(n)/float64(m), 'f', 1, 64) + unit
}

// Peak is what a test binary held at most, beside its budgets (0: none).
type Peak struct {
	Memory, MemoryBudget int64
	Disk, DiskBudget     int64
}

// Prefix starts every line scripts/budget writes into a test's output.
const Prefix = "budget: "

// String is the line scripts/budget ends a test binary's output with
// (without its newline).
func (p Peak) String() string {
	return fmt.Sprintf("%speak memory %s of %s, disk %s of %s", Prefix,
		FormatSize(p.Memory), budget(p.MemoryBudget), FormatSize(p.Disk), budget(p.DiskBudget))
}

func budget(n int64) string {
	if n == 0 {
		return "none"
	}
	return FormatSize(n)
}

var peakLine = regexp.MustCompile(`^` + Prefix + `peak memory (\S+) of (\S+), disk (\S+) of (\S+)$`)

// ParsePeak reads a line that String wrote; ok is false for any other.
func ParsePeak(line string) (p Peak, ok bool) {
	m := peakLine.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
	if m == nil {
		return Peak{}, false
	}
	dst := []*int64{&p.Memory, &p.MemoryBudget, &p.Disk, &p.DiskBudget}
	for i, s := range m[1:] {
		if s == "none" {
			continue
		}
		n, err := ParseSize(s)
		if err != nil {
			return Peak{}, false
		}
		*dst[i] = n
	}
	return p, true
}
