package s3store

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// closingBody is a request body as smithy-go wraps one: once closed, Read
// and WriteTo answer io.EOF (the SDK closes it as soon as Do returns).
type closingBody struct {
	mu     sync.Mutex
	r      *bytes.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closingBody) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.WriteTo(w)
}

func (b *closingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

type captureClient struct{ body io.ReadCloser }

func (c *captureClient) Do(req *http.Request) (*http.Response, error) {
	c.body = req.Body
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// The body net/http gets has no WriteTo, so its check for bytes past the
// declared length, made after a fast answer made the SDK close the body,
// ends cleanly instead of failing the connection under the response being
// read (the cause of TestLongServerMessagesAreBounded's "use of closed
// network connection").
func TestRequestBodiesEndCleanlyOnceTheSDKClosesThem(t *testing.T) {
	t.Parallel()
	// The SDK's body alone: io.Copy after Close reports io.EOF as an error.
	raw := &closingBody{r: bytes.NewReader([]byte("<Delete/>"))}
	require.NoError(t, raw.Close())
	_, err := io.Copy(io.Discard, raw)
	require.ErrorIs(t, err, io.EOF, "the failure this client prevents")

	next := &captureClient{}
	body := &closingBody{r: bytes.NewReader([]byte("<Delete/>"))}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/bucket?delete", body)
	require.NoError(t, err)
	resp, err := plainBodyClient{next: next}.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, ok := next.body.(io.WriterTo)
	require.False(t, ok, "net/http must not see the SDK body's WriteTo")
	sent, err := io.ReadAll(next.body)
	require.NoError(t, err)
	require.Equal(t, "<Delete/>", string(sent))
	require.NoError(t, body.Close())
	n, err := io.Copy(io.Discard, next.body)
	require.NoError(t, err, "a closed body reads as ended")
	require.Zero(t, n)
	require.NoError(t, next.body.Close())

	// A request without a body is passed through as it is.
	get, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/bucket", strings.NewReader(""))
	require.NoError(t, err)
	get.Body = http.NoBody
	resp, err = plainBodyClient{next: next}.Do(get)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.NoBody, next.body)
}
