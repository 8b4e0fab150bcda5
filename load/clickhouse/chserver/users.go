package chserver

import (
	"bytes"
	"encoding/xml"
	"sort"
	"strings"
)

// withUsers adds users (name to password) to the users file text, each
// with the default profile, quota and networks.
func withUsers(text string, users map[string]string) string {
	if len(users) == 0 {
		return text
	}
	names := make([]string, 0, len(users))
	for n := range users {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString("    <" + n + ">\n      <password>" + escape(users[n]) + "</password>\n      <networks><ip>::/0</ip></networks>\n      <profile>default</profile>\n      <quota>default</quota>\n    </" + n + ">\n")
	}
	return strings.Replace(text, "  </users>", b.String()+"  </users>", 1)
}

// escape is s as XML character data.
func escape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
