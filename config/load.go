package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path, applies the FLEETSYNC_* overrides found
// in env (an os.Environ()-style "NAME=value" list, so that tests never touch
// the process environment) and validates the result. On any problem it
// returns a nil Config and an error listing every problem, one per line.
func Load(path string, env []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w; pass --config with a readable YAML file", err)
	}
	return Parse(data, path, env)
}

// Parse is Load for a file already read: data is the YAML text and name what
// messages call it (the file's path). Empty data is allowed and leaves the
// defaults, so a configuration may come from the environment alone.
func Parse(data []byte, name string, env []string) (*Config, error) {
	if name == "" {
		name = "configuration"
	}
	s := newSchema()
	cfg := Default()
	// Whether sync.shard_index was given decides whether
	// JOB_COMPLETION_INDEX may set it.
	cfg.Sync.ShardIndex = shardIndexUnset
	errs := decodeYAML(cfg, s, data, name)
	errs = append(errs, applyEnv(cfg, s, env)...)
	if err := shardIndexFromJob(cfg, env); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Validating half-decoded values would only add noise.
		return nil, errors.Join(errs...)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decodeYAML strictly decodes data over cfg and returns every problem found:
// syntax errors, unknown and duplicate keys, and values of the wrong type,
// each with the file line.
//
// It walks the document node by node instead of decoding into Config with
// yaml's KnownFields(true): the effect is the same strictness, but the walk
// reports all unknown keys rather than the first, names them by their full
// path ("sync.lookbak", where yaml says only "field lookbak not found in type
// config.SyncConfig"), catches duplicate keys, and words type errors without
// echoing secrets.
func decodeYAML(cfg *Config, s *schema, data []byte, name string) []error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty or only comments: defaults
		}
		return []error{syntaxError(name, err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return []error{syntaxError(name, err)}
	default:
		return []error{fmt.Errorf("%s line %d: a second YAML document (after ---); keep the whole configuration in one document", name, extra.Line)}
	}

	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s line %d: the document is %s; write a mapping of sections (%s)",
			name, root.Line, kindName(root), strings.Join(s.sections, ", "))}
	}

	var errs []error
	seenSect := map[string]int{}
	seenKey := map[string]int{}
	forEachKey(root, name, "", &errs, func(kn, vn *yaml.Node) {
		sect := kn.Value
		if !s.bySect[sect] {
			msg := fmt.Sprintf("%s line %d: unknown key %q", name, kn.Line, sect)
			if hint := suggest(sect, s.sections); hint != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", hint)
			} else {
				msg += fmt.Sprintf("; the sections are %s", strings.Join(s.sections, ", "))
			}
			errs = append(errs, errors.New(msg))
			return
		}
		if first, dup := seenSect[sect]; dup {
			errs = append(errs, fmt.Errorf("%s line %d: duplicate key %q (first at line %d); merge the two", name, kn.Line, sect, first))
			return
		}
		seenSect[sect] = kn.Line
		if isNull(vn) {
			return // "sync:" with nothing under it keeps the defaults
		}
		if vn.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s line %d: %s: want a mapping of keys, not %s", name, vn.Line, sect, kindName(vn)))
			return
		}
		decodeKeys(cfg, s, vn, name, sect, seenKey, &errs)
	})
	return errs
}

// decodeKeys decodes the keys of mapping m, which is the section or group
// at path, into cfg; a nested group is walked the same way.
func decodeKeys(cfg *Config, s *schema, m *yaml.Node, name, path string, seenKey map[string]int, errs *[]error) {
	forEachKey(m, name, path, errs, func(kn, vn *yaml.Node) {
		kp := path + "." + kn.Value
		if s.groups[kp] {
			if first, dup := seenKey[kp]; dup {
				*errs = append(*errs, fmt.Errorf("%s line %d: duplicate key %q (first at line %d); merge the two", name, kn.Line, kp, first))
				return
			}
			seenKey[kp] = kn.Line
			switch {
			case isNull(vn):
			case vn.Kind != yaml.MappingNode:
				*errs = append(*errs, fmt.Errorf("%s line %d: %s: want a mapping of keys (%s), not %s", name, vn.Line, kp, strings.Join(s.keyNames(kp), ", "), kindName(vn)))
			default:
				decodeKeys(cfg, s, vn, name, kp, seenKey, errs)
			}
			return
		}
		k, ok := s.byPath[kp]
		if !ok {
			msg := fmt.Sprintf("%s line %d: unknown key %q", name, kn.Line, kp)
			if hint := s.suggestKey(path, kn.Value); hint != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", hint)
			} else {
				msg += fmt.Sprintf("; remove it (the keys of %s are %s)", path, strings.Join(s.keyNames(path), ", "))
			}
			*errs = append(*errs, errors.New(msg))
			return
		}
		if first, dup := seenKey[kp]; dup {
			*errs = append(*errs, fmt.Errorf("%s line %d: duplicate key %q (first at line %d); keep one", name, kn.Line, kp, first))
			return
		}
		seenKey[kp] = kn.Line
		if err := setNode(k.field(cfg), vn, k); err != nil {
			*errs = append(*errs, fmt.Errorf("%s line %d: %s: %w", name, vn.Line, kp, err))
		}
	})
}

// forEachKey calls fn for each key and value of mapping m (the top level
// when section is "", else that section), reporting keys that are not plain
// names (merge keys, lists, maps) instead of calling fn.
func forEachKey(m *yaml.Node, name, section string, errs *[]error, fn func(k, v *yaml.Node)) {
	where := "at the top level"
	if section != "" {
		where = "under " + section
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], resolve(m.Content[i+1])
		switch {
		case kn.Kind == yaml.ScalarNode && kn.ShortTag() == "!!merge":
			*errs = append(*errs, fmt.Errorf("%s line %d: merge keys (<<) are not supported %s; write the keys out", name, kn.Line, where))
		case kn.Kind != yaml.ScalarNode:
			*errs = append(*errs, fmt.Errorf("%s line %d: a key %s is %s; keys are plain names", name, kn.Line, where, kindName(kn)))
		default:
			fn(kn, vn)
		}
	}
}

// setNode decodes the value node n into the key's field v. A null value
// ("key:" or "key: ~") keeps the default. A list key also takes a single
// scalar as a one-item list.
func setNode(v reflect.Value, n *yaml.Node, k *key) error {
	if isNull(n) {
		return nil
	}
	t := v.Type()
	if isList(t) {
		switch n.Kind {
		case yaml.ScalarNode:
			v.Set(reflect.ValueOf([]string{n.Value}))
			return nil
		case yaml.SequenceNode:
			var items []string // an empty list is nil, like the default
			for i, item := range n.Content {
				item = resolve(item)
				if item.Kind != yaml.ScalarNode || isNull(item) {
					return fmt.Errorf("item %d is %s; want a string", i+1, kindName(item))
				}
				items = append(items, item.Value)
			}
			v.Set(reflect.ValueOf(items))
			return nil
		}
		return fmt.Errorf("want a list of strings, not %s", kindName(n))
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want %s, not %s", want(t), kindName(n))
	}
	return setScalar(v, n.Value, exampleOf(k))
}

// resolve follows aliases (*anchor) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports an empty or null value ("key:", "key: ~", "key: null").
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName names a node's shape for messages, without its content (which
// could be a secret).
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "empty"
		}
		return "a single value"
	case yaml.AliasNode:
		return "an alias"
	}
	return "empty"
}

// syntaxError reports a YAML parse error on one line. yaml's syntax errors
// carry the line but not the text around it, so no secret can leak through.
func syntaxError(name string, err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return fmt.Errorf("%s: invalid YAML: %s; fix the syntax there", name, strings.TrimPrefix(msg, "yaml: "))
}

// applyEnv applies every FLEETSYNC_* entry of env to cfg and returns a
// problem for each variable that names no key or holds a malformed value.
// Entries are applied in name order so the result never depends on env's
// order; for a name given twice the later entry wins, as in exec.Cmd.
// An empty value sets a string to "" and a list to empty (so
// FLEETSYNC_SOURCE_TOKEN_FILE= clears a token_file set in the file); for
// other types it is malformed.
func applyEnv(cfg *Config, s *schema, env []string) []error {
	vals := map[string]string{}
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue
		}
		vals[name] = val
	}
	names := make([]string, 0, len(vals))
	for n := range vals {
		names = append(names, n)
	}
	sort.Strings(names)

	var errs []error
	for _, name := range names {
		val := vals[name]
		k, ok := s.byEnv[name]
		if !ok {
			errs = append(errs, errors.New(unknownEnv(s, name)))
			continue
		}
		v := k.field(cfg)
		t := v.Type()
		switch {
		case isList(t):
			var items []string
			for _, item := range strings.Split(val, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			v.Set(reflect.ValueOf(items))
		case t.Kind() == reflect.String:
			v.SetString(val)
		default:
			text := strings.TrimSpace(val)
			if text == "" {
				errs = append(errs, fmt.Errorf("%s (%s): empty; set %s (default %s), or unset the variable", name, k.path, want(t), exampleOf(k)))
				continue
			}
			if err := setScalar(v, text, exampleOf(k)); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", name, k.path, err))
			}
		}
	}
	return errs
}

// unknownEnv words the error for a FLEETSYNC_ variable that names no key,
// with the likely intended name when there is one.
func unknownEnv(s *schema, name string) string {
	msg := name + ": no such configuration key"
	known := make([]string, 0, len(s.keys))
	for _, k := range s.keys {
		known = append(known, k.env)
	}
	hint := suggest(name, known)
	if hint == "" {
		// The right key in the wrong section: FLEETSYNC_SYNC_TOKEN.
		rest := strings.TrimPrefix(name, envPrefix)
		if _, keyPart, ok := strings.Cut(rest, "_"); ok {
			for _, k := range s.keys {
				if strings.ToUpper(k.name) == keyPart {
					hint = k.env
					break
				}
			}
		}
	}
	if hint != "" {
		return msg + fmt.Sprintf(" (did you mean %s?); rename or unset it", hint)
	}
	return msg + "; variables are FLEETSYNC_<SECTION>_<KEY> for the keys in the example configuration; rename or unset it"
}
