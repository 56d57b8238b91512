package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// diskUsage is what the files under root take on disk (allocated blocks,
// each hard-linked file once), and its entry that takes the most (a
// t.TempDir() is named after its test). It does not cross into another
// file system mounted below root.
func diskUsage(root string) (total int64, top string, topSize int64) {
	st, err := os.Lstat(root)
	if err != nil {
		return 0, "", 0
	}
	dev := st.Sys().(*syscall.Stat_t).Dev
	seen := map[uint64]bool{}
	byTop := map[string]int64{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error { //nolint:errcheck // a file gone while walked counts for nothing
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		s := info.Sys().(*syscall.Stat_t)
		if s.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && s.Nlink > 1 {
			if seen[s.Ino] {
				return nil
			}
			seen[s.Ino] = true
		}
		n := s.Blocks * 512
		total += n
		if rel, err := filepath.Rel(root, path); err == nil && rel != "." {
			first, _, _ := strings.Cut(rel, string(filepath.Separator))
			byTop[first] += n
		}
		return nil
	})
	for name, n := range byTop {
		if n > topSize || (n == topSize && name < top) {
			top, topSize = name, n
		}
	}
	return total, top, topSize
}
