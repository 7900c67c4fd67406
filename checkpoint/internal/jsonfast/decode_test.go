package jsonfast

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

type jdUID string

type jdDevice struct {
	Pool     string   `json:"poolName"`
	Name     string   `json:"deviceName"`
	Requests []string `json:"requestNames,omitempty"`
	CDI      []string `json:"cdiDeviceIDs"`
	Index    int8     `json:"index"`
	Weight   float32  `json:"weight"`
	Healthy  *bool    `json:"healthy"`
}

type jdRecord struct {
	UID       jdUID                           `json:"uid"`
	Name      string                          `json:"name"`
	Count     int                             `json:"count"`
	Size      uint16                          `json:"size"`
	Ratio     float64                         `json:"ratio"`
	Pods      map[string]struct{}             `json:"pods"`
	Drivers   map[string][]jdDevice           `json:"drivers"`
	Next      *jdRecord                       `json:"next"`
	Raw       json.RawMessage                 `json:"raw"`
	Bytes     []byte                          `json:"bytes"`
	Any       any                             `json:"any"`
	When      time.Time                       `json:"when"`
	Labels    map[jdUID]string                `json:"labels"`
	Skipped   string                          `json:"-"`
	Dash      string                          `json:"-,"`
	Untagged  bool                            //
	unexposed int                             //nolint:unused // must be ignored
	Nested    struct{ A, B []map[string]int } `json:"nested"`
}

var jdSamples = []string{
	`{"uid":"u-1","name":"claim","count":-3,"size":65535,"ratio":1.5e-3,"pods":{"p1":{},"p2":{}},` +
		`"drivers":{"gpu.example.com":[{"poolName":"node","deviceName":"gpu-0","requestNames":["gpus"],"cdiDeviceIDs":["a/b=c"],"index":-128,"weight":0.25,"healthy":true}]},` +
		`"next":{"uid":"u-2","next":null},"raw":{"x":[1,2]},"bytes":"aGVsbG8=","any":[1,"a",null],"when":"2026-11-21T20:00:00Z",` +
		`"labels":{"k":"v"},"-":"dash","Untagged":true,"nested":{"A":[{"x":1}],"B":null},"unknown":{"deep":[true,false,null,1e5,"s"]}}`,
	` { "name" : "spaces\t" , "count" : 0 } `,
	`{"name":"esc\"aped\u00e9\ud83d\ude00","uid":"caf\u00e9"}`,
	`{"name":"unicode é 😀"}`,
	`{"NAME":"case-insensitive match"}`,
	`{"Name":"exact field name, not tag"}`,
	`{"name":"dup","name":"dup2","pods":{"a":{}},"pods":{"b":{}}}`,
	`{"drivers":{"d":[{"poolName":"a","index":1}]},"drivers":{"d":[{"deviceName":"b"}]}}`,
	`{"count":1.5}`,
	`{"count":99999999999999999999}`,
	`{"size":-1}`,
	`{"count":"1"}`,
	`{"name":1}`,
	`{"ratio":1e400}`,
	`{"count":01}`,
	`{"count":-}`,
	`{"name":"bad \x01 control"}`,
	"{\"name\":\"bad utf8 \xff\"}",
	`{"name":"x"} trailing`,
	`{"name":"x",}`,
	`{"drivers":{"d":[{},]}}`,
	`null`,
	`{"next":null,"pods":null,"drivers":null,"name":null,"count":null}`,
	`{"pods":{}, "drivers":{"x":[]}}`,
	`[]`,
	`{"any":{"a":{"b":[{}]}}}`,
	`{"when":"not a time"}`,
	`{"labels":{"\u006b":"escaped key"}}`,
	``,
	`{"next":{"next":{"next":{"name":"deep"}}}}`,
	strings.Repeat(`{"next":`, 10001) + `null` + strings.Repeat(`}`, 10001),
	strings.Repeat(`{"next":`, 200) + `null` + strings.Repeat(`}`, 200),
}

// check decodes data both ways and fails unless results and errors agree.
func jdCheck(t *testing.T, data []byte) {
	t.Helper()
	var want, got jdRecord
	wantErr := json.Unmarshal(data, &want)
	gotErr := Unmarshal(data, &got)
	if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
		t.Fatalf("input %q:\nencoding/json error: %v\njsondec error:       %v", data, wantErr, gotErr)
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("input %q:\nencoding/json: %+v\njsondec:       %+v", data, want, got)
	}
}

func TestFastUnmarshalMatchesEncodingJSON(t *testing.T) {
	for i, s := range jdSamples {
		t.Run(fmt.Sprint(i), func(t *testing.T) { jdCheck(t, []byte(s)) })
	}
}

func TestFastUnmarshalTakesFastPath(t *testing.T) {
	// The fast path must actually handle a plain record; otherwise the
	// package is only a slower encoding/json.
	d := jsonScan{data: []byte(jdSamples[0]), intern: map[string]string{}}
	var r jdRecord
	if err := decoderFor(reflect.TypeFor[jdRecord]())(&d, reflect.ValueOf(&r).Elem()); err != nil {
		t.Fatalf("fast path refused a plain record: %v", err)
	}
	if r.Drivers["gpu.example.com"][0].CDI[0] != "a/b=c" || string(r.Bytes) != "hello" || !r.When.Equal(time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)) {
		t.Fatalf("fast path decoded %+v", r)
	}
	type withArray struct{ A [2]int }
	if decoderFor(reflect.TypeFor[withArray]()) != nil {
		t.Fatal("arrays should leave the whole type to encoding/json")
	}
}

func FuzzUnmarshalMatchesEncodingJSON(f *testing.F) {
	for _, s := range jdSamples {
		if len(s) < 4096 { // the deep-nesting seeds only slow minimization down
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { jdCheck(t, data) })
}

// claim is shaped like the kubelet's ClaimInfoState.
type jdClaim struct {
	ClaimUID    jdUID                                   `json:"ClaimUID"`
	ClaimName   string                                  `json:"ClaimName"`
	Namespace   string                                  `json:"Namespace"`
	PodUIDs     map[string]struct{}                     `json:"PodUIDs"`
	DriverState map[string]struct{ Devices []jdDevice } `json:"DriverState"`
}

func BenchmarkFastUnmarshal(b *testing.B) {
	c := jdClaim{ClaimUID: "0000002a-1111-4222-8333-00000000002a", ClaimName: "pod-42-gpus-x7k2q", Namespace: "team-a",
		PodUIDs: map[string]struct{}{"0000002a-aaaa-4bbb-8ccc-00000000002a": {}},
		DriverState: map[string]struct{ Devices []jdDevice }{"gpu.example.com": {Devices: []jdDevice{
			{Pool: "node-a", Name: "gpu-4", Requests: []string{"gpus"}, CDI: []string{"example.com/gpu=claim-0000002a-1111-4222-8333-00000000002a-gpu-0-v0", "example.com/gpu=common"}},
			{Pool: "node-a", Name: "gpu-5", Requests: []string{"gpus"}, CDI: []string{"example.com/gpu=claim-0000002a-1111-4222-8333-00000000002a-gpu-1-v0", "example.com/gpu=common"}},
		}}},
	}
	claimJSON, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		new  func() any
	}{
		{"claim", claimJSON, func() any { return new(jdClaim) }},
		{"mixed", []byte(jdSamples[0]), func() any { return new(jdRecord) }},
	} {
		b.Run("value="+tc.name+"/impl=encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if err := json.Unmarshal(tc.data, tc.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("value="+tc.name+"/impl=jsondec", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if err := Unmarshal(tc.data, tc.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("value="+tc.name+"/impl=jsondec-Decoder", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.data)))
			var dec Decoder
			for b.Loop() {
				if err := dec.Unmarshal(tc.data, tc.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
