// Package docsnippet reads the code blocks of the project's markdown pages,
// so that tests can run them as written. A block is fenced with a language
// (```sql, ```sh, ```text, …); the line before it may mark it
// <!-- illustrative --> (not run) or <!-- runs in: WHERE --> (run by the
// test or script WHERE names). Blocks inside a <!-- setup … --> comment are
// hidden from readers and set up what a page's snippets name.
package docsnippet

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Markers a block's preceding line may carry.
const (
	IllustrativeMark = "<!-- illustrative -->"
	runsInPrefix     = "<!-- runs in: "
	setupPrefix      = "<!-- setup"
	commentEnd       = "-->"
)

// Block is one code block of a page.
type Block struct {
	File    string // the page, as given to Parse
	Line    int    // the line of its opening fence (or first line), from 1
	Lang    string // the fence's language; "" for an unlabelled or indented block
	Section string // the heading it is under ("" before the first)
	Text    string // its lines, with the fence's indentation removed

	Indented     bool   // an indented code block, not a fenced one
	Illustrative bool   // marked <!-- illustrative -->
	RunsIn       string // WHERE of a <!-- runs in: WHERE --> mark
	Setup        bool   // inside a <!-- setup … --> comment
}

// String names the block for a failure message.
func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var (
	fence    = regexp.MustCompile("^( *)```([A-Za-z0-9_-]*)\\s*$")
	listItem = regexp.MustCompile(`^( *)([-*+]|[0-9]+[.)]) +`)
	heading  = regexp.MustCompile(`^#{1,6} +(.*)$`)
)

// Parse returns every code block of the markdown file at path, in order. It
// fails on a fence left open.
func Parse(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("docsnippet: %w", err)
	}
	p := parser{file: path}
	scanner := bufio.NewScanner(strings.NewReader(string(data)))
	scanner.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for n := 1; scanner.Scan(); n++ {
		p.line(n, scanner.Text())
	}
	if p.open != nil {
		return nil, fmt.Errorf("docsnippet: %s:%d: a fence is never closed", path, p.open.Line)
	}
	p.endIndented()
	return p.blocks, nil
}

// parser is Parse's state between lines.
type parser struct {
	file    string
	blocks  []Block
	section string

	open       *Block // the fenced block being read
	openIndent int
	body       strings.Builder

	indented *Block // the indented block being read
	blank    bool   // the previous line was blank
	content  int    // the content indentation of the list item we are in
	mark     string // the marker line before the next block, if any
	setup    bool   // inside a <!-- setup comment
}

func (p *parser) line(n int, line string) {
	if p.open != nil {
		p.inFence(line)
		return
	}
	trimmed := strings.TrimSpace(line)
	indent := len(line) - len(strings.TrimLeft(line, " "))

	if p.indented != nil {
		if trimmed == "" || indent >= p.content+4 {
			if trimmed != "" || p.body.Len() > 0 {
				p.body.WriteString(cut(line, p.content+4) + "\n")
			}
			p.blank = trimmed == ""
			return
		}
		p.endIndented()
	}

	if m := fence.FindStringSubmatch(line); m != nil {
		p.open = &Block{File: p.file, Line: n, Lang: m[2], Section: p.section, Setup: p.setup}
		p.openIndent = len(m[1])
		p.applyMark(p.open)
		p.body.Reset()
		return
	}
	switch {
	case trimmed == "":
		p.blank = true
		return
	case p.setup && trimmed == commentEnd:
		p.setup = false
	case strings.HasPrefix(trimmed, setupPrefix) && !strings.HasSuffix(trimmed, commentEnd):
		p.setup = true
	case trimmed == IllustrativeMark || strings.HasPrefix(trimmed, runsInPrefix):
		p.mark = trimmed
		p.blank = false
		return
	case p.blank && !p.setup && indent >= p.content+4 && !listItem.MatchString(line):
		p.indented = &Block{File: p.file, Line: n, Section: p.section, Indented: true}
		p.applyMark(p.indented)
		p.body.Reset()
		p.body.WriteString(cut(line, p.content+4) + "\n")
		return
	}
	if m := heading.FindStringSubmatch(line); m != nil && indent == 0 {
		p.section, p.content = m[1], 0
	} else if m := listItem.FindStringSubmatch(line); m != nil {
		p.content = len(m[0])
	} else if p.blank && indent < p.content {
		p.content = indent // a paragraph after the list
	}
	p.mark, p.blank = "", false
}

// inFence reads a line of an open fenced block.
func (p *parser) inFence(line string) {
	if strings.TrimSpace(line) == "```" {
		p.open.Text = p.body.String()
		p.blocks = append(p.blocks, *p.open)
		p.open, p.blank = nil, false
		return
	}
	p.body.WriteString(cut(line, p.openIndent) + "\n")
}

// endIndented ends the indented block being read, if any.
func (p *parser) endIndented() {
	if p.indented == nil {
		return
	}
	p.indented.Text = strings.TrimRight(p.body.String(), "\n") + "\n"
	p.blocks = append(p.blocks, *p.indented)
	p.indented = nil
}

// applyMark gives b the marker on the line before it and clears it.
func (p *parser) applyMark(b *Block) {
	switch {
	case p.mark == IllustrativeMark:
		b.Illustrative = true
	case strings.HasPrefix(p.mark, runsInPrefix):
		b.RunsIn = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(p.mark, runsInPrefix), commentEnd))
	}
	p.mark = ""
}

// cut removes up to n leading spaces from line.
func cut(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}
