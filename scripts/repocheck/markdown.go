package main

import (
	"regexp"
	"strings"
)

// Span is an inline code span of a Markdown file and the line it starts on.
type Span struct {
	Line int
	Text string
}

// outsideFences returns the file's lines with those of fenced code blocks
// (``` or ~~~) blanked, so that line numbers stay.
func outsideFences(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		if fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")) {
			fence = t[:3]
			lines[i] = ""
			continue
		}
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// CodeSpans returns the inline code spans of a Markdown text outside fenced
// code blocks, in order: a run of n backticks up to the next run of exactly
// n, across line ends (a line end inside a span reads as a space).
func CodeSpans(text string) []Span {
	lines := outsideFences(text)
	joined := strings.Join(lines, "\n")
	var spans []Span
	line := 1
	for i := 0; i < len(joined); {
		if joined[i] == '\n' {
			line++
			i++
			continue
		}
		if joined[i] != '`' {
			i++
			continue
		}
		n := backticks(joined[i:])
		end := closing(joined[i+n:], n)
		if end < 0 {
			i += n
			continue
		}
		content := joined[i+n : i+n+end]
		spans = append(spans, Span{Line: line, Text: strings.TrimSpace(strings.ReplaceAll(content, "\n", " "))})
		line += strings.Count(content, "\n")
		i += n + end + n
	}
	return spans
}

func backticks(s string) int {
	n := 0
	for n < len(s) && s[n] == '`' {
		n++
	}
	return n
}

// closing finds the next run of exactly n backticks in s.
func closing(s string, n int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		m := backticks(s[i:])
		if m == n {
			return i
		}
		i += m
	}
	return -1
}

// Row is one row of a Markdown table, its cells trimmed.
type Row struct {
	Line  int
	Cells []string
}

// Table is a Markdown table: a header row, a delimiter row, then rows.
type Table struct {
	Header Row
	Rows   []Row
}

var delimiterRow = regexp.MustCompile(`^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)

// Tables returns the Markdown tables of a text outside fenced code blocks.
func Tables(text string) []Table {
	lines := outsideFences(text)
	var tables []Table
	for i := 0; i+1 < len(lines); i++ {
		if !isTableLine(lines[i]) || !delimiterRow.MatchString(strings.TrimSpace(lines[i+1])) {
			continue
		}
		t := Table{Header: Row{Line: i + 1, Cells: cells(lines[i])}}
		j := i + 2
		for ; j < len(lines) && isTableLine(lines[j]); j++ {
			t.Rows = append(t.Rows, Row{Line: j + 1, Cells: cells(lines[j])})
		}
		tables = append(tables, t)
		i = j - 1
	}
	return tables
}

func isTableLine(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "|") }

// cells splits a table line at the pipes outside code spans.
func cells(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(l, "|")
	var out []string
	var cur strings.Builder
	inCode := false
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '`':
			inCode = !inCode
		case l[i] == '\\' && i+1 < len(l) && l[i+1] == '|':
			cur.WriteByte('|')
			i++
			continue
		case l[i] == '|' && !inCode:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(l[i])
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

var linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// LinkTargets returns the targets of the inline links in a Markdown text,
// without a #fragment.
func LinkTargets(text string) []string {
	var out []string
	for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
		target, _, _ := strings.Cut(m[1], "#")
		out = append(out, target)
	}
	return out
}
