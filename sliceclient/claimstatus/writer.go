package claimstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// ErrInvalid is matched by errors for options or devices the writer refuses
// before asking the API server.
var ErrInvalid = errors.New("claimstatus: invalid input")

// Options configure a Writer.
type Options struct {
	// REST is a client of the resource.k8s.io/v1 API group, for example
	// clientset.ResourceV1().RESTClient(). Required.
	REST rest.Interface
	// DriverName is the DRA driver whose entries the writer owns. Required.
	DriverName string
	// FieldManager is the server-side apply field manager; default
	// "dranode/" + DriverName. Each driver needs its own: a manager's apply
	// removes what it applied before and does not apply again.
	FieldManager string
}

// Claim names the ResourceClaim to write. UID is required: the write fails
// (Conflict) when the claim of that name has another UID.
type Claim struct {
	Namespace, Name string
	UID             types.UID
}

func (c Claim) String() string { return c.Namespace + "/" + c.Name + " (" + string(c.UID) + ")" }

// Writer writes one driver's entries of ResourceClaims' status.devices. It
// is safe for concurrent use.
type Writer struct {
	rest    rest.Interface
	driver  string
	manager string
}

// New checks opts and returns a writer.
func New(opts Options) (*Writer, error) {
	if opts.REST == nil {
		return nil, fmt.Errorf("%w: Options.REST is required", ErrInvalid)
	}
	if opts.DriverName == "" {
		return nil, fmt.Errorf("%w: Options.DriverName is required", ErrInvalid)
	}
	if opts.FieldManager == "" {
		opts.FieldManager = "dranode/" + opts.DriverName
	}
	return &Writer{rest: opts.REST, driver: opts.DriverName, manager: opts.FieldManager}, nil
}

// FieldManager is the writer's server-side apply field manager.
func (w *Writer) FieldManager() string { return w.manager }

// Apply makes devices the driver's entries of the claim's status.devices:
// entries of this driver that devices does not name are removed, other
// drivers' entries stay as they are. Each device's Driver may be empty (it
// is set) or the writer's driver; Pool and Device are required, and Data,
// when set, must be raw JSON. Conflicts with other managers over this
// driver's entries are forced: the driver is their authority.
func (w *Writer) Apply(ctx context.Context, claim Claim, devices []resourcev1.AllocatedDeviceStatus) error {
	if claim.Namespace == "" || claim.Name == "" || claim.UID == "" {
		return fmt.Errorf("%w: claim %s: namespace, name and UID are required", ErrInvalid, claim)
	}
	entries := make([]resourcev1.AllocatedDeviceStatus, len(devices))
	for i, d := range devices {
		switch {
		case d.Driver != "" && d.Driver != w.driver:
			return fmt.Errorf("%w: claim %s: device %d is of driver %q, the writer's is %q", ErrInvalid, claim, i, d.Driver, w.driver)
		case d.Pool == "" || d.Device == "":
			return fmt.Errorf("%w: claim %s: device %d: pool and device are required", ErrInvalid, claim, i)
		case d.Data != nil && len(d.Data.Raw) == 0:
			return fmt.Errorf("%w: claim %s: device %s/%s: data must be raw JSON (RawExtension.Raw)", ErrInvalid, claim, d.Pool, d.Device)
		}
		d.Driver = w.driver
		entries[i] = d
	}
	body, err := json.Marshal(applyConfiguration{
		APIVersion: resourcev1.SchemeGroupVersion.String(),
		Kind:       "ResourceClaim",
		Metadata:   applyMetadata{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		Status:     applyStatus{Devices: entries},
	})
	if err != nil {
		return fmt.Errorf("%w: claim %s: encoding the status: %v", ErrInvalid, claim, err)
	}
	err = w.rest.Patch(types.ApplyPatchType).
		Namespace(claim.Namespace).Resource("resourceclaims").Name(claim.Name).SubResource("status").
		Param("fieldManager", w.manager).Param("force", "true").
		Body(body).Do(ctx).Error()
	if err != nil {
		return &WriteError{Claim: claim, Driver: w.driver, Devices: len(entries), Err: err}
	}
	return nil
}

// Clear removes the driver's entries from the claim's status.devices. A
// claim that is gone, or was created again under another UID
// (ErrClaimReplaced), has none: that is success.
func (w *Writer) Clear(ctx context.Context, claim Claim) error {
	err := w.Apply(ctx, claim, nil)
	if apierrors.IsNotFound(err) || errors.Is(err, ErrClaimReplaced) {
		return nil
	}
	return err
}

// ErrClaimReplaced is matched by a WriteError for a claim whose name now
// belongs to a claim with another UID (the old one was deleted and a new
// one created): the API server refuses the apply's metadata.uid as an
// immutable field.
var ErrClaimReplaced = errors.New("the claim was replaced by one with another UID")

// fieldCause reports whether err is an Invalid status with a cause of type
// t, for field (any field when empty).
func fieldCause(err error, t metav1.CauseType, field string) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == t && (field == "" || c.Field == field) {
			return true
		}
	}
	return false
}

// applyConfiguration is the apply patch: only what the driver owns. The
// typed apply configurations of client-go would do the same, at the cost of
// linking their OpenAPI schema.
type applyConfiguration struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   applyMetadata `json:"metadata"`
	Status     applyStatus   `json:"status"`
}

type applyMetadata struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// applyStatus always names the list, empty included: the manager then
// owns no entry, and server-side apply removes those it owned.
type applyStatus struct {
	Devices []resourcev1.AllocatedDeviceStatus `json:"devices"`
}

// WriteError is a write the API server refused or that did not reach it.
type WriteError struct {
	Claim   Claim
	Driver  string
	Devices int // entries applied; 0 for a clear
	Err     error
}

func (e *WriteError) Error() string {
	what := fmt.Sprintf("applying %d status.devices entries", e.Devices)
	if e.Devices == 0 {
		what = "removing the status.devices entries"
	}
	return fmt.Sprintf("claim %s: driver %s: %s: %v", e.Claim, e.Driver, what, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// Is matches ErrClaimReplaced.
func (e *WriteError) Is(target error) bool {
	return target == ErrClaimReplaced && fieldCause(e.Err, metav1.CauseTypeFieldValueInvalid, "metadata.uid")
}

// Reason is a short, bounded reason for err, for a metric label: the API
// server's status reason (NotFound, Conflict, Timeout, ...), except that
// a refusal by the per-driver authorization check, which the server
// reports as Invalid with a Forbidden cause, is "Forbidden" like a refusal
// by RBAC, and a replaced claim (ErrClaimReplaced) is "Replaced"; "Invalid"
// also for input the writer refused itself; "Unknown" when the server was
// not reached or gave no reason.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrInvalid):
		return string(metav1.StatusReasonInvalid)
	case errors.Is(err, ErrClaimReplaced):
		return "Replaced"
	case fieldCause(err, metav1.CauseTypeForbidden, ""):
		return string(metav1.StatusReasonForbidden)
	}
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return "Unknown"
}
