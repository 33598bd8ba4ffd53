package s3store

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// plainBodyClient sends each request through next with a body that offers
// net/http nothing but Read and Close, so that a fast answer cannot cut the
// connection under its own response.
//
// smithy-go closes a request's body as soon as Do returns, and its body's
// WriteTo then answers io.EOF, which io.Copy reports as an error. After
// sending a body of known length, net/http's connection writer copies the
// body once more to see that nothing is left over; when the server has
// already answered and the SDK closed the body, that copy fails, and the
// transport closes the connection while the SDK still reads the response
// ("use of closed network connection" instead of the server's answer). Read
// on a closed body answers io.EOF, which io.Copy takes as the end.
type plainBodyClient struct {
	next aws.HTTPClient
}

// Do implements aws.HTTPClient.
func (c plainBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = plainBody{req.Body}
	}
	return c.next.Do(req)
}

// plainBody hides every method of a request body but Read and Close.
type plainBody struct {
	body io.ReadCloser
}

func (b plainBody) Read(p []byte) (int, error) { return b.body.Read(p) }

func (b plainBody) Close() error { return b.body.Close() }
