package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// strictValue converts a value from the file, an environment variable or a
// flag to the type of its key, or says why it cannot, quoting the value. It
// guesses nothing: a number without a unit is not a duration (the file would
// otherwise read 30 as 30ns where the variable and the flag refuse "30"), a
// single value is not a list, a fraction is not a whole number.
func strictValue(from, to reflect.Value) (any, error) {
	v := from.Interface()
	switch to.Kind() {
	case reflect.Int64:
		if to.Type() != durationType {
			break
		}
		s, ok := scalarString(from)
		if !ok {
			return nil, fmt.Errorf("must be a duration with a unit (\"30s\", \"100ms\"), got %s", describe(from))
		}
		d, err := time.ParseDuration(s)
		if err == nil {
			return d, nil
		}
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return nil, fmt.Errorf("%q has no unit: write it with one, as in %q or %q", s, s+"s", s+"ms")
		}
		return nil, fmt.Errorf("%q is not a duration (a number with a unit: \"30s\", \"100ms\", \"1m30s\")", s)
	case reflect.Slice:
		if k := from.Kind(); k != reflect.Slice && k != reflect.Array {
			return nil, fmt.Errorf("must be a list (as in [\"a\", \"b\"]), got %s", describe(from))
		}
	case reflect.Struct, reflect.Map:
		if from.Kind() != reflect.Map {
			return nil, fmt.Errorf("must be a mapping of keys to values, got %s", describe(from))
		}
	case reflect.String:
		// A number is a string where a string is wanted (nodeName: 123).
		if s, ok := scalarString(from); ok {
			return s, nil
		}
		return nil, fmt.Errorf("must be a string, got %s", describe(from))
	case reflect.Bool:
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("must be true or false, got %s", describe(from))
	case reflect.Int:
		if s, ok := scalarString(from); ok {
			if n, err := strconv.Atoi(s); err == nil {
				return n, nil
			}
		}
		return nil, fmt.Errorf("must be a whole number, got %s", describe(from))
	case reflect.Float32:
		if s, ok := scalarString(from); ok {
			if f, err := strconv.ParseFloat(s, 32); err == nil {
				return float32(f), nil
			}
		}
		return nil, fmt.Errorf("must be a number, got %s", describe(from))
	}
	return v, nil
}

// scalarString is a string, number or boolean as text, as written.
func scalarString(v reflect.Value) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64), true
	}
	return "", false
}

// describe names a value for an error: strings quoted, collections by kind.
func describe(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	if s, ok := scalarString(v); ok {
		return s
	}
	return v.Type().String()
}

func isDNSSubdomain(s string) bool {
	if len(s) > 253 || s == "" {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// ValidInstanceID reports whether s may be kubelet.instanceID: what goes
// into a socket file name unchanged, a pod UID or any short name without
// path separators.
func ValidInstanceID(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != "." && s != ".."
}
