package scope

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/impersonate"
)

// DataKey is where the client registry lives in policy data, for messages.
const DataKey = "data.limen.config.clients"

// Bounds, so that a bundle cannot make the matcher arbitrarily slow.
const (
	MaxClients = 256
	MaxRules   = 256
	maxList    = 64
	maxLen     = 253
)

// Parse validates the client registry (DataKey: the decoded JSON object,
// nil when the data has none) and compiles it. Every error names the key
// it is about, from DataKey down, and says what is allowed there.
func Parse(raw any) (*Set, error) {
	s := &Set{clients: map[string]*Scope{}}
	if raw == nil {
		return s, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an object mapping client names to their entries, not %s", DataKey, kind(raw))
	}
	if len(m) > MaxClients {
		return nil, fmt.Errorf("%s registers %d clients, at most %d are allowed", DataKey, len(m), MaxClients)
	}
	for _, name := range sortedKeys(m) {
		key := DataKey + "." + name
		if err := identity.ValidClient(name); err != nil {
			return nil, fmt.Errorf("%s: %v", key, err)
		}
		sc, err := parseClient(key, name, m[name])
		if err != nil {
			return nil, err
		}
		s.clients[name] = sc
	}
	return s, nil
}

// ParseJSON is Parse of a JSON document, for tests and offline checks.
func ParseJSON(b []byte) (*Set, error) {
	var raw any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	return Parse(raw)
}

func parseClient(key, name string, raw any) (*Scope, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an object (description, unscoped, scope, nonResourceURLs, userPrefix), not %s", key, kind(raw))
	}
	sc := &Scope{Client: name}
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "description":
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf("%s.description must be a string, not %s", key, kind(v))
			}
		case "unscoped":
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("%s.unscoped must be true or false, not %s", key, kind(v))
			}
			sc.unscoped = b
		case "userPrefix":
			p, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s.userPrefix must be a string, not %s", key, kind(v))
			}
			if err := impersonate.ValidateUserPrefix(p); err != nil {
				return nil, fmt.Errorf("%s.userPrefix: %v", key, err)
			}
			sc.UserPrefix = p
		case "scope":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s.scope must be a list of entries, not %s", key, kind(v))
			}
			if len(list) > MaxRules {
				return nil, fmt.Errorf("%s.scope has %d entries, at most %d are allowed", key, len(list), MaxRules)
			}
			sc.rules = make([]rule, 0, len(list))
			for i, e := range list {
				r, err := parseRule(fmt.Sprintf("%s.scope[%d]", key, i), e)
				if err != nil {
					return nil, err
				}
				sc.rules = append(sc.rules, r)
			}
		case "nonResourceURLs":
			urls, err := stringList(key+".nonResourceURLs", v, true)
			if err != nil {
				return nil, err
			}
			for i, u := range urls {
				ur, err := parseURL(fmt.Sprintf("%s.nonResourceURLs[%d]", key, i), u)
				if err != nil {
					return nil, err
				}
				sc.urls = append(sc.urls, ur)
			}
		default:
			return nil, fmt.Errorf("%s has unknown key %q (allowed: description, unscoped, scope, nonResourceURLs, userPrefix)", key, k)
		}
	}
	if sc.unscoped && (len(sc.rules) > 0 || len(sc.urls) > 0) {
		return nil, fmt.Errorf("%s is unscoped and lists a scope: say one or the other", key)
	}
	return sc, nil
}

func parseRule(key string, raw any) (rule, error) {
	var r rule
	m, ok := raw.(map[string]any)
	if !ok {
		return r, fmt.Errorf("%s must be an object (group, version, resource, subresources, namespaces, verbs), not %s", key, kind(raw))
	}
	for _, k := range sortedKeys(m) {
		v := m[k]
		var err error
		switch k {
		case "group":
			r.group, err = name(key+".group", v, true)
		case "version":
			r.version, err = name(key+".version", v, false)
		case "resource":
			r.resource, err = name(key+".resource", v, false)
		case "subresources":
			r.subresources, err = names(key+".subresources", v)
		case "namespaces":
			r.namespaces, err = names(key+".namespaces", v)
			if err == nil && slices.Contains(r.namespaces, "*") {
				if len(r.namespaces) != 1 {
					err = fmt.Errorf("%s: \"*\" (every namespace) must be the only entry", key+".namespaces")
				}
				r.anyNamespace, r.namespaces = true, nil
			}
		case "verbs":
			r.verbs, err = verbs(key+".verbs", v)
		default:
			err = fmt.Errorf("%s has unknown key %q (allowed: group, version, resource, subresources, namespaces, verbs); "+
				"a scope is coarse by design: object names and selectors are RBAC's", key, k)
		}
		if err != nil {
			return r, err
		}
	}
	for _, req := range []string{"group", "version", "resource", "verbs"} {
		if _, ok := m[req]; !ok {
			return r, fmt.Errorf("%s needs %q (group \"\" is the core API)", key, req)
		}
	}
	return r, nil
}

func verbs(key string, raw any) (verb, error) {
	list, err := stringList(key, raw, false)
	if err != nil {
		return 0, err
	}
	var out verb
	for i, v := range list {
		if v == "*" {
			out |= verbAll
			continue
		}
		b := verbBit(v)
		if b == 0 {
			return 0, fmt.Errorf("%s[%d]: %q is not a verb the API server classifies "+
				"(get, list, watch, create, update, patch, delete, deletecollection, or \"*\")", key, i, v)
		}
		out |= b
	}
	return out, nil
}

// name reads a group, version or resource: a non-empty name (the group
// may be "" for the core API) without "/" or "*": alternate versions and
// other resources are entries of their own.
func name(key string, raw any, mayBeEmpty bool) (string, error) {
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %s", key, kind(raw))
	}
	if s == "" && !mayBeEmpty {
		return "", fmt.Errorf("%s must not be empty", key)
	}
	if err := plainName(s); err != nil {
		return "", fmt.Errorf("%s: %v", key, err)
	}
	return s, nil
}

func names(key string, raw any) ([]string, error) {
	list, err := stringList(key, raw, true)
	if err != nil {
		return nil, err
	}
	for i, s := range list {
		if s == "*" && strings.HasSuffix(key, ".namespaces") {
			continue
		}
		if s == "" {
			return nil, fmt.Errorf("%s[%d] must not be empty", key, i)
		}
		if err := plainName(s); err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", key, i, err)
		}
	}
	return list, nil
}

func plainName(s string) error {
	if len(s) > maxLen {
		return fmt.Errorf("%q is longer than %d bytes", s[:32]+"…", maxLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '/' || c == '*' || c == '%' || c == '?' {
			return fmt.Errorf("%q: a name has no white space, control bytes, \"/\", \"*\", \"%%\" or \"?\"", s)
		}
	}
	return nil
}

func stringList(key string, raw any, mayBeEmpty bool) ([]string, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a list of strings, not %s", key, kind(raw))
	}
	if len(list) == 0 && !mayBeEmpty {
		return nil, fmt.Errorf("%s must not be empty", key)
	}
	if len(list) > maxList {
		return nil, fmt.Errorf("%s has %d entries, at most %d are allowed", key, len(list), maxList)
	}
	out := make([]string, len(list))
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s[%d] must be a string, not %s", key, i, kind(v))
		}
		out[i] = s
	}
	return out, nil
}

// parseURL reads a non-resource URL: a canonical absolute path, with an
// optional "*" at the end for every path under it.
func parseURL(key, s string) (urlRule, error) {
	u := urlRule{path: s}
	if p, ok := strings.CutSuffix(s, "*"); ok {
		u.path, u.prefix = p, true
	}
	if !strings.HasPrefix(u.path, "/") {
		return u, fmt.Errorf("%s: %q must be an absolute path such as /version", key, s)
	}
	for i := 0; i < len(u.path); i++ {
		c := u.path[i]
		if c <= ' ' || c >= 0x7f || c == '*' || c == '?' || c == '#' || c == '%' || c == '\\' {
			return u, fmt.Errorf("%s: %q: a path has no white space, control bytes or \"*?#%%\\\" (\"*\" only at its end)", key, s)
		}
	}
	for _, seg := range strings.Split(u.path[1:], "/") {
		if seg == "." || seg == ".." {
			return u, fmt.Errorf("%s: %q is not a canonical path", key, s)
		}
	}
	return u, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, int, int64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
