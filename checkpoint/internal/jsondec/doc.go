// Package jsondec decodes JSON into Go values like encoding/json.Unmarshal,
// faster, for the shapes that stored records have: structs with tagged
// fields, strings, numbers, booleans, slices, string-keyed maps and
// pointers.
//
// It is a fast path, never a second opinion: whenever it meets anything it
// does not handle exactly as encoding/json would (escaped strings, a key
// that only matches a field case-insensitively, a type with its own
// UnmarshalJSON, malformed input), it hands the value, or the whole
// document, to encoding/json. So its results and errors are encoding/json's;
// a differential fuzz test holds it to that.
//
// The speed comes from a decoder compiled once per type and from scanning
// the input once, where encoding/json scans it twice (a validity pass, then
// the decoding pass).
package jsondec
