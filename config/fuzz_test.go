package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// envNames lists every env tag of t, depth first.
func envNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if tag := f.Tag.Get("env"); tag != "" {
			out = append(out, tag)
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, envNames(f.Type)...)
		}
	}
	return out
}

// FuzzLoad: no config file text and no value of any variable panics Load; what
// it accepts passes Validate.
func FuzzLoad(f *testing.F) {
	names := envNames(reflect.TypeFor[Config]())
	if len(names) == 0 {
		f.Fatal("no env tags found")
	}
	sample, err := os.ReadFile("../configs/sluice.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(sample), uint8(0), "1")
	f.Add("http:\n  bind_port: -1\n", uint8(1), "")
	f.Add("unknown: 1\n", uint8(2), "x")
	f.Add("", uint8(3), "99999999999999999999")
	f.Add("limits: [1, 2]\n", uint8(4), "true")
	path := filepath.Join(f.TempDir(), "sluice.yaml")
	f.Fuzz(func(t *testing.T, yaml string, which uint8, value string) {
		if len(yaml) > 4096 {
			return
		}
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		name := names[int(which)%len(names)]
		c, err := Load(path, []string{name + "=" + value})
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("%s=%q with %q: loaded but invalid: %v", name, value, yaml, verr)
			}
		}
	})
}
