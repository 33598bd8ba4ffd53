package s3server

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/tombstoneworks/communitydeletion/internal/testserver"
)

// IsListObjectsV2 reports whether r is a ListObjectsV2 call (path-style).
func IsListObjectsV2(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2"
}

// IsDeleteObjects reports whether r is a DeleteObjects call.
func IsDeleteObjects(r *http.Request) bool {
	_, ok := r.URL.Query()["delete"]
	return r.Method == http.MethodPost && ok
}

// WriteError answers r with an S3 error document. It reads r's body to the
// end first, as a real server does: answering before the client has sent
// its body makes the client's transport close the connection while it
// still reads the answer, and the error the client sees is then that.
func WriteError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	_, _ = io.Copy(io.Discard, r.Body)
	body, _ := xml.Marshal(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string
		Message string
	}{Code: code, Message: message})
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), body...))
}

// deleteRequest is the body of a DeleteObjects call.
type deleteRequest struct {
	Objects []struct {
		Key string `xml:"Key"`
	} `xml:"Object"`
	Quiet bool `xml:"Quiet"`
}

// ReadDeleteKeys returns the keys of a DeleteObjects call's body, leaving the
// body readable for forwarding.
func ReadDeleteKeys(r *http.Request) ([]string, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req deleteRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("parse DeleteObjects body: %w", err)
	}
	keys := make([]string, len(req.Objects))
	for i, o := range req.Objects {
		keys[i] = o.Key
	}
	return keys, nil
}

// KeyFailure is a per-key error a PartialDelete answer reports.
type KeyFailure struct {
	Code, Message string
}

// PartialDelete answers a DeleteObjects call the way a server that could
// delete only some keys would: it deletes the keys fail returns nil for
// (through a direct client to the real server) and reports the others in the
// answer's Errors, leaving them in place. Any other call is forwarded.
func (s *Server) PartialDelete(fail func(key string) *KeyFailure) testserver.Hook {
	direct := s.Client("")
	return func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if !IsDeleteObjects(r) {
			forward.ServeHTTP(w, r)
			return
		}
		keys, err := ReadDeleteKeys(r)
		if err != nil {
			WriteError(w, r, http.StatusBadRequest, "MalformedXML", err.Error())
			return
		}
		type keyError struct {
			Key, Code, Message string
		}
		var failed []keyError
		var ok []types.ObjectIdentifier
		for _, key := range keys {
			if f := fail(key); f != nil {
				failed = append(failed, keyError{key, f.Code, f.Message})
			} else {
				ok = append(ok, types.ObjectIdentifier{Key: aws.String(key)})
			}
		}
		if len(ok) > 0 {
			out, err := direct.DeleteObjects(context.WithoutCancel(r.Context()), &s3.DeleteObjectsInput{
				Bucket: aws.String(s.Bucket), Delete: &types.Delete{Objects: ok, Quiet: aws.Bool(true)},
			})
			if err != nil || len(out.Errors) > 0 {
				WriteError(w, r, http.StatusInternalServerError, "InternalError", fmt.Sprintf("test proxy: delete the others: %v", err))
				return
			}
		}
		body, _ := xml.Marshal(struct {
			XMLName xml.Name   `xml:"http://s3.amazonaws.com/doc/2006-03-01/ DeleteResult"`
			Errors  []keyError `xml:"Error"`
		}{Errors: failed})
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append([]byte(xml.Header), body...))
	}
}
