package claimstatus

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
)

// restFor is a resource.k8s.io/v1 REST client for the server at url.
func restFor(t *testing.T, url string) rest.Interface {
	t.Helper()
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := resourcev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gv := resourcev1.SchemeGroupVersion
	c, err := rest.RESTClientFor(&rest.Config{Host: url, ContentConfig: rest.ContentConfig{
		GroupVersion: &gv, NegotiatedSerializer: serializer.NewCodecFactory(scheme).WithoutConversion(),
	}, APIPath: "/apis"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestApplyRequest: the request is a forced server-side apply of the
// status subresource under the driver's manager, with the claim's UID and
// only this driver's entries; a clear names an empty list.
func TestApplyRequest(t *testing.T) {
	type request struct {
		method, path, contentType, manager, force string
		body                                      map[string]any
	}
	var got request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		got = request{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"),
			manager: r.URL.Query().Get("fieldManager"), force: r.URL.Query().Get("force")}
		if err := json.Unmarshal(data, &got.body); err != nil {
			t.Errorf("body %q: %v", data, err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim"}`))
	}))
	defer srv.Close()
	w, err := New(Options{REST: restFor(t, srv.URL), DriverName: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	claim := Claim{Namespace: "ns", Name: "c", UID: "uid-1"}
	dev := resourcev1.AllocatedDeviceStatus{Pool: "p", Device: "d", Data: &runtime.RawExtension{Raw: []byte(`{"a":1}`)}}
	if err := w.Apply(context.Background(), claim, []resourcev1.AllocatedDeviceStatus{dev}); err != nil {
		t.Fatal(err)
	}
	if got.method != http.MethodPatch || got.path != "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status" ||
		got.contentType != "application/apply-patch+yaml" || got.manager != "dranode/gpu.example.com" || got.force != "true" {
		t.Errorf("request %+v", got)
	}
	meta, _ := got.body["metadata"].(map[string]any)
	devices, _ := got.body["status"].(map[string]any)["devices"].([]any)
	if meta["uid"] != "uid-1" || got.body["kind"] != "ResourceClaim" || len(devices) != 1 {
		t.Fatalf("body %+v", got.body)
	}
	entry := devices[0].(map[string]any)
	if entry["driver"] != "gpu.example.com" || entry["pool"] != "p" || entry["device"] != "d" || entry["data"].(map[string]any)["a"] != float64(1) {
		t.Errorf("entry %+v", entry)
	}
	if err := w.Clear(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	if list, ok := got.body["status"].(map[string]any)["devices"].([]any); !ok || len(list) != 0 {
		t.Errorf("clear sent devices %#v, want an empty list", got.body["status"])
	}
}

func TestInvalidInput(t *testing.T) {
	if _, err := New(Options{DriverName: "x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New without REST: %v", err)
	}
	if _, err := New(Options{REST: &rest.RESTClient{}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New without a driver: %v", err)
	}
	w, err := New(Options{REST: &rest.RESTClient{}, DriverName: "gpu.example.com", FieldManager: "mine"})
	if err != nil || w.FieldManager() != "mine" {
		t.Fatalf("New: %v, manager %q", err, w.FieldManager())
	}
	claim := Claim{Namespace: "ns", Name: "c", UID: "u"}
	for name, tt := range map[string]struct {
		claim Claim
		dev   resourcev1.AllocatedDeviceStatus
	}{
		"no UID":        {Claim{Namespace: "ns", Name: "c"}, resourcev1.AllocatedDeviceStatus{Pool: "p", Device: "d"}},
		"other driver":  {claim, resourcev1.AllocatedDeviceStatus{Driver: "nic.example.com", Pool: "p", Device: "d"}},
		"no device":     {claim, resourcev1.AllocatedDeviceStatus{Pool: "p"}},
		"data not raw":  {claim, resourcev1.AllocatedDeviceStatus{Pool: "p", Device: "d", Data: &runtime.RawExtension{}}},
		"data not JSON": {claim, resourcev1.AllocatedDeviceStatus{Pool: "p", Device: "d", Data: &runtime.RawExtension{Raw: []byte("{")}}},
	} {
		err := w.Apply(context.Background(), tt.claim, []resourcev1.AllocatedDeviceStatus{tt.dev})
		if !errors.Is(err, ErrInvalid) || Reason(err) != "Invalid" {
			t.Errorf("%s: %v (reason %q), want ErrInvalid", name, err, Reason(err))
		}
	}
}

func TestReason(t *testing.T) {
	gk := schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}
	gr := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	wrap := func(err error) error { return &WriteError{Err: err} }
	for _, tt := range []struct {
		err  error
		want string
	}{
		{wrap(apierrors.NewForbidden(gr, "c", errors.New("rbac"))), "Forbidden"},
		{wrap(apierrors.NewInvalid(gk, "c", field.ErrorList{field.Forbidden(field.NewPath("status", "devices"), "needs resourceclaims/driver")})), "Forbidden"},
		{wrap(apierrors.NewInvalid(gk, "c", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u", "field is immutable")})), "Replaced"},
		{wrap(apierrors.NewInvalid(gk, "c", field.ErrorList{field.TooLong(field.NewPath("status", "devices").Index(0).Child("data"), "", 10240)})), "Invalid"},
		{wrap(apierrors.NewNotFound(gr, "c")), "NotFound"},
		{wrap(apierrors.NewTimeoutError("slow", 1)), "Timeout"},
		{wrap(errors.New("connection refused")), "Unknown"},
	} {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	if !errors.Is(wrap(apierrors.NewInvalid(gk, "c", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u", "field is immutable")})), ErrClaimReplaced) {
		t.Error("a refused metadata.uid does not match ErrClaimReplaced")
	}
}
