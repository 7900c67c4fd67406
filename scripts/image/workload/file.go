package workload

import (
	"os"
	"path/filepath"
)

// FilesEnv asks the workload program to read files: a glob (such as
// "/var/run/kubernetes.io/dra-device-attributes/*/*/*/*.json", for files
// whose names the test does not know), each match's content reported in
// [Report.Files].
const FilesEnv = "WORKLOAD_FILES"

// File is one file a container read.
type File struct {
	// Path is absolute, as the container sees it.
	Path string `json:"path"`
	// Content is what the file held.
	Content string `json:"content"`
	// Error is why it could not be read; empty when it was.
	Error string `json:"error,omitempty"`
}

// ReadFiles reads every file that pattern matches, in the order of
// [filepath.Glob] (sorted). A malformed pattern is one [File] with its
// error: a report never leaves something out silently.
func ReadFiles(pattern string) []File {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return []File{{Path: pattern, Error: err.Error()}}
	}
	files := []File{}
	for _, m := range matches {
		f := File{Path: m}
		data, err := os.ReadFile(m)
		if err != nil {
			f.Error = err.Error()
		}
		f.Content = string(data)
		files = append(files, f)
	}
	return files
}
