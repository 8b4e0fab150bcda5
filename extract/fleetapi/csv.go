package fleetapi

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DecodeValuesCSV reads a `GET values?format=csv` body and calls fn for each
// point. The body has four columns: `Timestamp` (POSIX milliseconds), `Human
// readable date (UTC)`, a value column named after the variable's label, and
// `Context`, the context object written as a Python bytes literal
// (b'{...}'), whose b' and ' are stripped (and Python escapes undone) before
// the JSON inside is read and compacted. A row with an empty value cell gives
// no point. The Point's Context is only valid during fn.
//
// Errors from fn are returned wrapped but otherwise unchanged; a malformed
// body is a *DecodeError naming its row (the header is row 0).
func DecodeValuesCSV(r io.Reader, fn func(Point) error) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	fail := func(row int, format string, args ...any) error {
		line, _ := cr.FieldPos(0)
		return &DecodeError{Frame: -1, Row: row, Offset: cr.InputOffset(),
			Msg: fmt.Sprintf("csv line %d: ", line) + fmt.Sprintf(format, args...)}
	}
	head, err := cr.Read()
	if err == io.EOF {
		return &DecodeError{Frame: -1, Row: 0, Msg: "the CSV body is empty: no header"}
	}
	if err != nil {
		return csvReadError(0, cr, err)
	}
	if len(head) != 4 {
		return fail(0, "the header has %d columns, expected 4 (Timestamp, Human readable date (UTC), <label>, Context)", len(head))
	}
	first := strings.TrimPrefix(strings.TrimSpace(head[0]), "\ufeff")
	if !strings.EqualFold(first, "Timestamp") || !strings.EqualFold(strings.TrimSpace(head[3]), "Context") {
		return fail(0, "unexpected header %q", head)
	}
	var ctx, scratch []byte
	var at position
	for row := 1; ; row++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return csvReadError(row, cr, err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line
		}
		if len(rec) != 4 {
			return fail(row, "the row has %d fields, expected 4", len(rec))
		}
		ts, err := parseMillis([]byte(strings.TrimSpace(rec[0])))
		if err != nil {
			return fail(row, "timestamp %q: %v", rec[0], err)
		}
		vs := strings.TrimSpace(rec[2])
		if vs == "" || vs == "null" || vs == "None" || strings.EqualFold(vs, "nan") {
			continue
		}
		val, err := parseFloat([]byte(vs))
		if err != nil {
			return fail(row, "value %q: %v", rec[2], err)
		}
		ctx, scratch, err = pythonBytesJSON(ctx[:0], scratch[:0], rec[3], &at)
		if err != nil {
			return fail(row, "context %q: %v", clip(rec[3], 80), err)
		}
		if err := fn(at.point(ts, val, ctx)); err != nil {
			return fmt.Errorf("values csv row %d: %w", row, err)
		}
	}
}

func csvReadError(row int, cr *csv.Reader, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &DecodeError{Frame: -1, Row: row, Offset: cr.InputOffset(), Msg: "malformed CSV", Err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &DecodeError{Frame: -1, Row: row, Offset: cr.InputOffset(), Msg: "the body ended early", Err: err}
	}
	return &DecodeError{Frame: -1, Row: row, Offset: cr.InputOffset(), Msg: "reading the body", Err: err}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pythonBytesJSON reads a context cell written as a Python bytes literal
// holding JSON and appends the compact JSON object to dst, and reads its
// position into *at. An empty cell, an empty literal and null give "{}".
// scratch is reused for unescaping.
func pythonBytesJSON(dst, scratch []byte, cell string, at *position) ([]byte, []byte, error) {
	*at = position{}
	s := strings.TrimSpace(cell)
	switch {
	case s == "":
		return append(dst, '{', '}'), scratch, nil
	case len(s) >= 3 && (s[0] == 'b' || s[0] == 'B') && (s[1] == '\'' || s[1] == '"') && s[len(s)-1] == s[1]:
		s = s[2 : len(s)-1]
	default:
		return dst, scratch, errors.New("not a Python bytes literal (b'...')")
	}
	body := []byte(s)
	if bytes.IndexByte(body, '\\') >= 0 {
		var err error
		scratch, err = unescapePythonBytes(scratch, body)
		if err == nil && validObject(scratch, nil) == nil {
			body = scratch
		} else if validObject(body, nil) != nil {
			// Neither reading is JSON; report the Python one.
			if err == nil {
				err = validObject(scratch, nil)
			}
			return dst, scratch, err
		}
	}
	if err := validObject(body, at); err != nil {
		return dst, scratch, err
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return append(dst, '{', '}'), scratch, nil
	}
	return appendCompact(dst, trimmed), scratch, nil
}

// validObject checks that b holds exactly one JSON object (or is empty or
// null, which mean no context); when at is not nil, it reads the object's
// position into *at in the same pass.
func validObject(b []byte, at *position) error {
	i, _ := skipSpace(b, 0)
	if i == len(b) {
		return nil
	}
	if string(b[i:]) == "null" {
		return nil
	}
	if b[i] != '{' {
		return errors.New("the context is not a JSON object")
	}
	end, _, err := scanValue(b, i, 0, at)
	if errors.Is(err, errShort) {
		return errors.New("the context's JSON ends early")
	}
	if err != nil {
		return err
	}
	if j, _ := skipSpace(b, end); j != len(b) {
		return errors.New("text after the context's JSON object")
	}
	return nil
}

// unescapePythonBytes undoes the escapes of a Python bytes literal body.
func unescapePythonBytes(dst, b []byte) ([]byte, error) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i+1 >= len(b) {
			return dst, errors.New("a lone backslash ends the bytes literal")
		}
		i++
		switch b[i] {
		case '\\', '\'', '"':
			dst = append(dst, b[i])
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'x':
			if i+2 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) {
				return dst, errors.New("an invalid \\x escape")
			}
			dst = append(dst, unhex(b[i+1])<<4|unhex(b[i+2]))
			i += 2
		default:
			// Python keeps unknown escapes as they are.
			dst = append(dst, '\\', b[i])
		}
	}
	return dst, nil
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
