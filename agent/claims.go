package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// ErrClaimNotFound is matched by ClaimSource errors for a claim that does
// not exist.
var ErrClaimNotFound = errors.New("ResourceClaim not found")

// ClaimSource reads ResourceClaims by namespace and name. Implementations
// must be safe for concurrent use and return the current object (the agent
// checks its UID and allocation), or an error matching ErrClaimNotFound.
type ClaimSource interface {
	GetClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error)
}

// APIClaimSource reads claims from the API server with one GET each: always
// current, and cheap enough with a client sized for it (see
// config.Claims.QPS).
type APIClaimSource struct {
	// REST is a client of the resource.k8s.io/v1 API group: the one
	// NewAPIClaimSource builds, or a clientset's ResourceV1().RESTClient().
	REST rest.Interface
}

// GetClaim implements ClaimSource.
func (s APIClaimSource) GetClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	claims := gentype.NewClient("resourceclaims", s.REST, apiParameterCodec, namespace,
		func() *resourcev1.ResourceClaim { return &resourcev1.ResourceClaim{} },
		gentype.PrefersProtobuf[*resourcev1.ResourceClaim]())
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s/%s", ErrClaimNotFound, namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// DirClaimSource reads claims from YAML files in Dir (standalone mode): every
// "*.yaml", "*.yml" or "*.json" file holding one ResourceClaim, read afresh
// on each call so that files can be edited while the agent runs.
type DirClaimSource struct {
	Dir string
}

// GetClaim implements ClaimSource.
func (s DirClaimSource) GetClaim(_ context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("claims directory: %w", err)
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(s.Dir, e.Name())
		c, err := ReadClaimFile(path)
		if err != nil {
			return nil, err
		}
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: %s/%s (no file in %s)", ErrClaimNotFound, namespace, name, s.Dir)
}

// ReadClaimFile decodes one ResourceClaim (YAML or JSON). Unknown fields are
// errors, so a misspelt field is not silently dropped.
func ReadClaimFile(path string) (*resourcev1.ResourceClaim, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading ResourceClaim file: %w", err)
	}
	var c resourcev1.ResourceClaim
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("ResourceClaim file %s: %w", path, err)
	}
	if c.Kind != "" && c.Kind != "ResourceClaim" {
		return nil, fmt.Errorf("ResourceClaim file %s: kind is %q, not ResourceClaim", path, c.Kind)
	}
	if c.APIVersion != "" && !strings.HasPrefix(c.APIVersion, "resource.k8s.io/") {
		return nil, fmt.Errorf("ResourceClaim file %s: apiVersion %q is not resource.k8s.io", path, c.APIVersion)
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	return &c, nil
}
