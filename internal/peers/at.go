package peers

// At names a records directory by its own path, for records kept apart from
// the peers' (the supervisor's copies of completions that came by POST alone).
func At(path string) Dir { return Dir{path: path} }
