package envtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are the files an environment's apiserver and scheduler are
// started with. Everything is generated in Go for each environment, so there
// is no openssl dependency and no key shared between environments.
type credentials struct {
	caPEM      []byte // trusted by the returned rest.Config
	caFile     string // caPEM, for kube-controller-manager's --root-ca-file
	certFile   string // serving certificate for 127.0.0.1 / localhost, signed by the CA
	keyFile    string
	saPubFile  string // service-account token verification key
	saKeyFile  string // service-account token signing key
	tokenFile  string // static token file with the admin token
	adminToken string
}

// ECDSA P-256 rather than RSA: generating keys costs microseconds instead of
// a noticeable share of the start time on a loaded machine.
func newCredentials(dir string, servingIPs []net.IP) (*credentials, error) {
	c := &credentials{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "serving.crt"),
		keyFile:   filepath.Join(dir, "serving.key"),
		saPubFile: filepath.Join(dir, "sa.pub"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("envtest: generating CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dranode-envtest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("envtest: creating CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("envtest: parsing CA certificate: %w", err)
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("envtest: generating serving key: %w", err)
	}
	servingTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, servingIPs...),
		DNSNames:     []string{"localhost"},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTmpl, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("envtest: creating serving certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("envtest: generating service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("envtest: encoding service-account public key: %w", err)
	}

	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("envtest: generating admin token: %w", err)
	}
	c.adminToken = hex.EncodeToString(token)

	servingKeyPEM, err := ecKeyPEM(servingKey)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := ecKeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path string
		data []byte
	}{
		{c.caFile, c.caPEM},
		{c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER})},
		{c.keyFile, servingKeyPEM},
		{c.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})},
		{c.saKeyFile, saKeyPEM},
		// token,user,uid,"group1,group2"
		{c.tokenFile, []byte(c.adminToken + ",admin,admin,system:masters\n")},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("envtest: writing %s: %w", f.path, err)
		}
	}
	return c, nil
}

func ecKeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("envtest: encoding EC key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
