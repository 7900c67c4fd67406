package images

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// memLayer is a gzip-compressed layer held in memory, written, compressed
// and hashed in one pass. go-containerregistry's tarball layers compress
// again for every digest and every write: a build of the agent's image
// (160 MB of binaries for two architectures) compressed each layer three
// times, and under the race detector (make check) took minutes.
type memLayer struct {
	gz             []byte
	digest, diffID v1.Hash
}

var _ v1.Layer = (*memLayer)(nil)

// newMemLayer makes a layer of the uncompressed tar that write writes,
// compressed at gzip's best speed (go-containerregistry's default:
// binaries gain little from more effort).
func newMemLayer(write func(io.Writer) error) (*memLayer, error) {
	var gz bytes.Buffer
	gzHash, tarHash := sha256.New(), sha256.New()
	zw, err := gzip.NewWriterLevel(io.MultiWriter(&gz, gzHash), gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if err := write(io.MultiWriter(zw, tarHash)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &memLayer{gz: gz.Bytes(), digest: sha256Of(gzHash), diffID: sha256Of(tarHash)}, nil
}

func sha256Of(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

func (l *memLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *memLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *memLayer) Size() (int64, error)                { return int64(len(l.gz)), nil }
func (l *memLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func (l *memLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}

func (l *memLayer) Uncompressed() (io.ReadCloser, error) {
	return gzip.NewReader(bytes.NewReader(l.gz))
}
