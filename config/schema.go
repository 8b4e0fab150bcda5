package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// envPrefix starts every environment override.
const envPrefix = "FLEETSYNC_"

// key is one configuration key as the loader sees it: its names in YAML and
// in the environment and where it lives in Config. The list is derived from
// the struct tags, so a field added to Config is a key everywhere at once.
type key struct {
	section string // the mapping holding it, e.g. "sync" or "clickhouse.tls"
	name    string // YAML key name, e.g. "lookback"
	path    string // "sync.lookback"
	env     string // "FLEETSYNC_SYNC_LOOKBACK"
	index   []int  // field indexes from Config down to the key
}

// field returns the key's field inside cfg, settable.
func (k *key) field(cfg *Config) reflect.Value {
	return reflect.ValueOf(cfg).Elem().FieldByIndex(k.index)
}

// schema indexes every key of Config by section, path and variable name.
type schema struct {
	sections []string        // section names in declaration order
	keys     []*key          // all keys in declaration order
	bySect   map[string]bool // known section names
	byPath   map[string]*key
	byEnv    map[string]*key
	// groups are the mappings nested in a section (clickhouse.tls), by
	// path; their keys are named by the full path in YAML and environment
	// alike (FLEETSYNC_CLICKHOUSE_TLS_CA_FILE).
	groups map[string]bool
}

// newSchema reflects over Config. It is rebuilt per Parse rather than kept in
// a package variable; the cost is a few microseconds.
func newSchema() *schema {
	s := &schema{bySect: map[string]bool{}, byPath: map[string]*key{}, byEnv: map[string]*key{}, groups: map[string]bool{}}
	ct := reflect.TypeOf(Config{})
	for i := 0; i < ct.NumField(); i++ {
		sf := ct.Field(i)
		sect := yamlName(sf)
		s.sections = append(s.sections, sect)
		s.bySect[sect] = true
		s.addKeys(sect, sf.Type, []int{i})
	}
	return s
}

// addKeys indexes the keys of the mapping at path, whose struct type is t
// and whose field indexes from Config are index; a struct-typed field other
// than a value type is a nested mapping (a group).
func (s *schema) addKeys(path string, t reflect.Type, index []int) {
	for j := 0; j < t.NumField(); j++ {
		kf := t.Field(j)
		name := yamlName(kf)
		idx := append(append([]int(nil), index...), j)
		if kf.Type.Kind() == reflect.Struct {
			s.groups[path+"."+name] = true
			s.addKeys(path+"."+name, kf.Type, idx)
			continue
		}
		k := &key{
			section: path,
			name:    name,
			path:    path + "." + name,
			env:     envPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_")) + "_" + strings.ToUpper(name),
			index:   idx,
		}
		s.keys = append(s.keys, k)
		s.byPath[k.path] = k
		s.byEnv[k.env] = k
	}
}

// yamlName is a struct field's YAML key: its tag up to any comma.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// durationType gets its own parsing and messages; Duration is an int64.
var durationType = reflect.TypeOf(Duration(0))

// isList reports whether t is a list key ([]string).
func isList(t reflect.Type) bool { return t.Kind() == reflect.Slice }

// setScalar parses text into v according to v's type; YAML scalars and
// environment values both come through here, so a value means the same in
// either place. The error says what was wrong with text and what is wanted;
// the caller prefixes where it came from. It never echoes a secret's text,
// and a string-typed key cannot fail.
func setScalar(v reflect.Value, text string, example string) error {
	t := v.Type()
	switch {
	case t == durationType:
		d, err := ParseDuration(text)
		if err != nil {
			return err // already says how to write one
		}
		v.SetInt(int64(d))
		return nil
	case t.Kind() == reflect.String:
		v.SetString(text)
		return nil
	case t.Kind() == reflect.Bool:
		b, ok := parseBool(text)
		if !ok {
			return fmt.Errorf("invalid boolean %q; write true or false", text)
		}
		v.SetBool(b)
		return nil
	case t.Kind() == reflect.Int:
		n, err := strconv.ParseInt(text, 10, strconv.IntSize)
		if err != nil {
			return fmt.Errorf("invalid whole number %q; write one like %s", text, example)
		}
		v.SetInt(n)
		return nil
	case t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("invalid number %q; write one like %s", text, example)
		}
		v.SetFloat(f)
		return nil
	}
	// Unreachable for the types Config uses; TestEveryKeyAcceptsItsDefault
	// guards it.
	return fmt.Errorf("unsupported configuration type %s", t)
}

// parseBool accepts the spellings people use in YAML and shell alike.
func parseBool(s string) (value, ok bool) {
	switch strings.ToLower(s) {
	case "true", "yes", "on", "1", "t", "y":
		return true, true
	case "false", "no", "off", "0", "f", "n":
		return false, true
	}
	return false, false
}

// want describes the kind of value a key of type t takes, for messages about
// a value of the wrong shape.
func want(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 90s, 1h30m or 730d"
	case isList(t):
		return "a list of strings"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Int:
		return "a whole number"
	case t.Kind() == reflect.Float64:
		return "a number"
	}
	return t.String()
}

// exampleOf prints a key's default as a value to copy, for messages.
func exampleOf(k *key) string { return formatValue(k.field(Default())) }

// formatValue prints a key's value as it would be written in YAML or the
// environment (secrets redacted, lists comma-separated).
func formatValue(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return Duration(v.Int()).String()
	case isList(v.Type()):
		return strings.Join(v.Interface().([]string), ",")
	case v.Kind() == reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// suggest returns the known name closest to name when it is a likely typo
// (edit distance 1, or 2 for names of five letters or more), else "".
func suggest(name string, known []string) string {
	limit := 1
	if len(name) >= 5 {
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes; keys
// are ASCII.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyNames lists the key names of one section (or group) in declaration
// order, a group by its own name once.
func (s *schema) keyNames(section string) []string {
	var names []string
	seen := map[string]bool{}
	for _, k := range s.keys {
		name := k.name
		if k.section != section {
			rest, ok := strings.CutPrefix(k.section, section+".")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(rest, ".")
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// suggestKey finds what an unknown key in section probably meant: a close
// name in the same section, else the same name in another section. It returns
// a full path or "".
func (s *schema) suggestKey(section, name string) string {
	if n := suggest(name, s.keyNames(section)); n != "" {
		return section + "." + n
	}
	for _, k := range s.keys {
		if k.name == name {
			return k.path
		}
	}
	return ""
}
