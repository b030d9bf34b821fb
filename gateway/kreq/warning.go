package kreq

import "strings"

// Warning formats msg as a Warning header value the way the API server
// sends them (code 299, no agent). kubectl prints Warning headers even for
// responses whose body it cannot decode, such as a refused discovery request,
// so a refusal's reason always reaches the user.
func Warning(msg string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '"' || r == '\\':
			return '\''
		case r < 0x20 || r > 0x7e:
			return ' '
		}
		return r
	}, msg)
	return `299 - "` + clean + `"`
}
