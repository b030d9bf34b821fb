package strictjson

import "testing"

func TestUnmarshal(t *testing.T) {
	type v struct {
		A int `json:"a"`
	}
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{`{"a":1}`, true},
		{`{"a":1,"b":2}`, false},
		{`{"a":1} `, false},
		{`{"a":1}{}`, false},
		{`{"a":"x"}`, false},
		{``, false},
		{`[1]`, false},
	} {
		var got v
		if err := Unmarshal([]byte(tt.in), &got); (err == nil) != tt.ok {
			t.Errorf("Unmarshal(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"a":1} `))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m map[string]any
		if Unmarshal(b, &m) == nil && len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n') {
			t.Fatalf("accepted trailing white space: %q", b)
		}
	})
}
