package cdi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// shape describes what JSON may appear at one place of a spec, for the
// strict field check. encoding/json matches field names case-insensitively
// and keeps the last of duplicate fields; runtimes load specs with a YAML
// decoder that does neither, so a spec we accept must be a spec they accept.
type shape struct {
	fields  map[string]*shape // an object with exactly these fields
	anyKeys bool              // an object with any keys, each with a scalar value (annotations)
	elem    *shape            // an array of these
	// A shape with none of the above is a scalar.
}

var (
	leaf       = &shape{}
	stringList = &shape{elem: leaf}
	freeMap    = &shape{anyKeys: true}

	editsShape = &shape{fields: map[string]*shape{
		"env": stringList,
		"deviceNodes": {elem: &shape{fields: map[string]*shape{
			"path": leaf, "hostPath": leaf, "type": leaf, "major": leaf, "minor": leaf,
			"fileMode": leaf, "permissions": leaf, "uid": leaf, "gid": leaf,
		}}},
		"netDevices": {elem: &shape{fields: map[string]*shape{
			"hostInterfaceName": leaf, "name": leaf,
		}}},
		"hooks": {elem: &shape{fields: map[string]*shape{
			"hookName": leaf, "path": leaf, "args": stringList, "env": stringList, "timeout": leaf,
		}}},
		"mounts": {elem: &shape{fields: map[string]*shape{
			"hostPath": leaf, "containerPath": leaf, "options": stringList, "type": leaf,
		}}},
		"intelRdt": {fields: map[string]*shape{
			"closID": leaf, "l3CacheSchema": leaf, "memBwSchema": leaf, "schemata": stringList, "enableMonitoring": leaf,
		}},
		"additionalGids": stringList,
	}}

	specShape = &shape{fields: map[string]*shape{
		"cdiVersion":  leaf,
		"kind":        leaf,
		"annotations": freeMap,
		"devices": {elem: &shape{fields: map[string]*shape{
			"name": leaf, "annotations": freeMap, "containerEdits": editsShape,
		}}},
		"containerEdits": editsShape,
	}}
)

// checkFields walks data and reports the first field that the spec schema
// does not define or that repeats within an object. Type mismatches are
// left to encoding/json, which reports them well.
func checkFields(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walk(dec, specShape, ""); err != nil && err != errWrongType {
		return err
	}
	return nil
}

// errWrongType stops the walk at an object or array where the schema wants
// a scalar (or the reverse): encoding/json then reports the mismatch with
// better words, and the walk never recurses deeper than the schema, however
// deeply the input nests.
var errWrongType = errors.New("wrong JSON type")

func walk(dec *json.Decoder, want *shape, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return &DecodeError{Path: path, Err: err}
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar; its type is checked by the real decode
	}
	isObject := want.fields != nil || want.anyKeys
	if (delim == '{' && !isObject) || (delim == '[' && want.elem == nil) {
		return errWrongType
	}
	switch delim {
	case '{':
		seen := make(map[string]bool)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return &DecodeError{Path: path, Err: err}
			}
			key := tok.(string) // the decoder guarantees object keys are strings
			fieldPath := join(path, key)
			if seen[key] {
				return &DecodeError{Path: fieldPath, Err: ErrDuplicateField}
			}
			seen[key] = true
			next := leaf
			if want.fields != nil {
				s, known := want.fields[key]
				if !known {
					return &DecodeError{Path: fieldPath, Err: fmt.Errorf("%w (the CDI spec defines no %q here)", ErrUnknownField, key)}
				}
				next = s
			}
			if err := walk(dec, next, fieldPath); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walk(dec, want.elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return &DecodeError{Path: path, Err: err}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
