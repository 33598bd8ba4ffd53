package s3store_test

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
	"github.com/tombstoneworks/communitydeletion/internal/testserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

func TestListDeleteAnyUnderARoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	// "a/…" and "a-…" interleave by byte order, not directory order.
	keys := []string{"p/a/b", "p/a-b", "p/a/a", "p/ab", "p/a.b", "p/z"}
	e.put(t, append([]string{"q/x", "pp/y"}, keys...)...)
	// Outside the root: must never be listed nor deleted.
	outside := e.cfg.Root[:len(e.cfg.Root)-1] + "-other/p/a/a"
	_, err := e.direct.PutObject(ctx, putInput(e.cfg.Bucket, outside))
	require.NoError(t, err)

	got, total := e.list(t, "p/")
	require.Equal(t, sorted(keys), got)
	require.Equal(t, sizeOf(keys), total)
	got, _ = e.list(t, "missing/")
	require.Empty(t, got)

	for prefix, want := range map[string]bool{"p/a/": true, "p/": true, "pp/": true, "p/a/c": false, "nothing/": false} {
		found, err := e.store.Any(ctx, prefix)
		require.NoError(t, err)
		require.Equal(t, want, found, prefix)
	}

	// Missing keys are deleted already: no error.
	require.NoError(t, e.store.Delete(ctx, []string{"p/a/a", "p/a/b", "p/a/gone"}))
	found, err := e.store.Any(ctx, "p/a/")
	require.NoError(t, err)
	require.False(t, found)
	require.True(t, e.exists(t, "p/a-b"))
	require.NoError(t, e.store.Delete(ctx, []string{"p/a/a", "p/a/b"}), "idempotent")
	got, _ = e.list(t, "p/")
	require.Equal(t, []string{"p/a-b", "p/a.b", "p/ab", "p/z"}, got)
	require.True(t, e.exists(t, "q/x"))
	require.True(t, e.exists(t, "pp/y"))
	_, err = e.direct.HeadObject(ctx, headInput(e.cfg.Bucket, outside))
	require.NoError(t, err, "the object outside the root survives")
	_, err = e.direct.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(e.cfg.Bucket), Key: aws.String(outside)})
	require.NoError(t, err)

	// An error from fn stops the listing and comes back as it is.
	stop := errors.New("stop")
	calls := 0
	err = e.store.List(ctx, "p/", func(string, int64) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)

	require.ErrorIs(t, e.store.Delete(ctx, []string{"p/z", ""}), s3store.ErrInvalidKey)
	require.ErrorIs(t, e.store.Delete(ctx, []string{"p/\xff"}), s3store.ErrInvalidKey)
	require.True(t, e.exists(t, "p/z"), "a refused batch deletes nothing")
}

// TestManyKeysUnderOnePrefix deletes 2,500 keys under community-a/ next to
// community-ab/ and community-a.txt, through pages and batches of at most
// 1,000.
func TestManyKeysUnderOnePrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	var target []string
	for i := range 2500 {
		target = append(target, fmt.Sprintf("community-a/%c/%05d", 'a'+i%3, i))
	}
	// (No key "community-a": a POSIX-backed gateway cannot hold it beside
	// the directory community-a/.)
	neighbours := []string{"community-ab/0", "community-ab/zzz", "community-a.txt", "community-/x", "community-a0"}
	e.put(t, append(neighbours, target...)...)

	var ops countOps
	var mu sync.Mutex
	var batches []int // keys per DeleteObjects call
	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		ops.add(r)
		if s3server.IsDeleteObjects(r) {
			keys, err := s3server.ReadDeleteKeys(r)
			if err != nil {
				s3server.WriteError(w, r, http.StatusBadRequest, "MalformedXML", err.Error())
				return
			}
			mu.Lock()
			batches = append(batches, len(keys))
			mu.Unlock()
		}
		forward.ServeHTTP(w, r)
	})
	got, total := e.list(t, "community-a/")
	require.Equal(t, sorted(target), got)
	require.Equal(t, sizeOf(target), total)
	require.Equal(t, 3, ops.get("list"), "pages of at most 1,000 keys")

	require.NoError(t, e.store.Delete(ctx, got))
	require.Equal(t, []int{1000, 1000, 500}, batches, "batches of at most 1,000 keys")
	found, err := e.store.Any(ctx, "community-a/")
	require.NoError(t, err)
	require.False(t, found)
	for _, key := range neighbours {
		require.True(t, e.exists(t, key), key)
	}
	left, _ := e.list(t, "community-a")
	require.Equal(t, []string{"community-a.txt", "community-a0", "community-ab/0", "community-ab/zzz"}, left)
}

// oddKeys need escaping in a URL or XML, or sort in surprising places.
var oddKeys = []string{
	"odd/with space", "odd/plus+sign", "odd/per%cent", "odd/per%20cent", "odd/question?mark", "odd/hash#tag",
	"odd/amp&lt<gt>", "odd/semi;colon", "odd/quote'\"", "odd/tab\tchar", "odd/del\x7fchar", "odd/ünïcödé",
	"odd/emoji😀", "odd/e\u0301combining", "odd/nbsp\u00a0", "odd/~!$()*,=:@", "odd/back\\slash", "odd/[brackets]{}",
	"odd/dots..", "odd/.hidden", "odd/caret^`|",
}

func TestKeysThatNeedEscaping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	e.put(t, oddKeys...)
	e.put(t, "odd-neighbour/with space")

	got, total := e.list(t, "odd/")
	require.Equal(t, sorted(oddKeys), got)
	require.Equal(t, sizeOf(oddKeys), total)
	for _, key := range oddKeys {
		found, err := e.store.Any(ctx, key)
		require.NoError(t, err)
		require.True(t, found, "%q", key)
	}
	require.NoError(t, e.store.Delete(ctx, got))
	for _, key := range oddKeys {
		require.False(t, e.exists(t, key), "%q", key)
	}
	require.True(t, e.exists(t, "odd-neighbour/with space"))
}

var (
	keyElementRE   = regexp.MustCompile(`<Key>([^<]*)</Key>`)
	listResultRE   = regexp.MustCompile(`<ListBucketResult[^>]*>`)
	encodingTypeRE = regexp.MustCompile(`<EncodingType>[^<]*</EncodingType>`)
)

// TestURLEncodedListing has the listing come URL-encoded, as Amazon S3
// sends it when asked (the gateway ignores encoding-type=url): the store
// decodes the keys.
func TestURLEncodedListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *s3store.Config) { c.ListPageSize = 7 })
	e.put(t, oddKeys...)
	e.proxy.SetHook(rewriteList(func(r *http.Request, body string) string {
		if r.URL.Query().Get("encoding-type") != "url" {
			t.Errorf("listing without encoding-type=url: %s", r.URL.RawQuery)
			return body
		}
		body = keyElementRE.ReplaceAllStringFunc(body, func(m string) string {
			key := html.UnescapeString(keyElementRE.FindStringSubmatch(m)[1])
			return "<Key>" + url.QueryEscape(key) + "</Key>"
		})
		body = encodingTypeRE.ReplaceAllString(body, "") // the gateway sends an empty one
		return listResultRE.ReplaceAllStringFunc(body, func(m string) string { return m + "<EncodingType>url</EncodingType>" })
	}))
	got, total := e.list(t, "odd/")
	require.Equal(t, sorted(oddKeys), got)
	require.Equal(t, sizeOf(oddKeys), total)
	found, err := e.store.Any(t.Context(), "odd/with space")
	require.NoError(t, err)
	require.True(t, found)
}

// TestKeyXMLCannotCarry deletes a key with a control character: the SDK
// would send it in a DeleteObjects body as U+FFFD, which names another key,
// so the store deletes it alone, the key in the URL.
func TestKeyXMLCannotCarry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	control := "ctl/a\x01b"
	lookalike := "ctl/a\uFFFDb" // what U+FFFD substitution would delete instead
	e.put(t, control, lookalike, "ctl/plain")
	var ops countOps
	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		ops.add(r)
		forward.ServeHTTP(w, r)
	})
	require.NoError(t, e.store.Delete(ctx, []string{control, "ctl/plain"}))
	require.False(t, e.exists(t, control))
	require.False(t, e.exists(t, "ctl/plain"))
	require.True(t, e.exists(t, lookalike), "the look-alike key must survive")
	require.Equal(t, 1, ops.get("deleteObjects"))
	require.Equal(t, 1, ops.get("deleteObject"))
}

// TestThrottlingIsRetried answers the first attempt of every call with 503
// SlowDown: the SDK's retryer retries each, and every operation succeeds.
func TestThrottlingIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *s3store.Config) { c.ListPageSize = 2; c.DeleteBatchSize = 2 })
	ctx := t.Context()
	keys := []string{"t/1", "t/2", "t/3", "t/4", "t/5"}
	e.put(t, keys...)

	var requests, throttled atomic.Int64
	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if requests.Add(1)%2 == 1 {
			throttled.Add(1)
			s3server.WriteError(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			return
		}
		forward.ServeHTTP(w, r)
	})
	got, _ := e.list(t, "t/")
	require.Equal(t, keys, got)
	found, err := e.store.Any(ctx, "t/")
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, e.store.Delete(ctx, keys))
	e.proxy.SetHook(nil)
	found, err = e.store.Any(ctx, "t/")
	require.NoError(t, err)
	require.False(t, found)

	// 3 pages + 1 probe + 3 delete batches, each once throttled and retried.
	require.Equal(t, int64(7), throttled.Load())
	require.Equal(t, int64(14), requests.Load())

	// Throttled for good: the retryer gives up after MaxAttempts and the
	// error says why, on one bounded line.
	e2 := newEnv(t, func(c *s3store.Config) { c.MaxAttempts = 3 })
	var attempts atomic.Int64
	e2.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		attempts.Add(1)
		s3server.WriteError(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
	})
	err = e2.store.List(ctx, "t/", func(string, int64) error { t.Fatal("listed"); return nil })
	var api smithy.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, "SlowDown", api.ErrorCode())
	require.Equal(t, int64(3), attempts.Load())
	errtexttest.RequireLine(t, err)
}

// TestPerKeyDeleteErrors has the server report some keys of a DeleteObjects
// call as failed: Delete fails naming them, they stay, the others go, and a
// retry completes.
func TestPerKeyDeleteErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("k/%02d", i))
	}
	e.put(t, keys...)
	failing := map[string]bool{e.cfg.Root + "k/03": true, e.cfg.Root + "k/04": true, e.cfg.Root + "k/05": true, e.cfg.Root + "k/07": true}
	e.proxy.SetHook(s3srv.PartialDelete(func(key string) *s3server.KeyFailure {
		if failing[key] {
			return &s3server.KeyFailure{Code: "AccessDenied", Message: "Access Denied"}
		}
		return nil
	}))
	err := e.store.Delete(ctx, keys)
	var de *s3store.DeleteError
	require.ErrorAs(t, err, &de)
	require.Equal(t, 4, de.Failed)
	require.Equal(t, 10, de.Total)
	require.Len(t, de.First, 3)
	require.Equal(t, s3store.KeyError{Key: "k/03", Code: "AccessDenied", Message: "Access Denied"}, de.First[0])
	require.Contains(t, err.Error(), `4 of 10 keys not deleted: "k/03" AccessDenied`)
	require.Contains(t, err.Error(), "and 1 more")
	errtexttest.RequireLine(t, err)
	left, _ := e.list(t, "k/")
	require.Equal(t, []string{"k/03", "k/04", "k/05", "k/07"}, left)

	// NoSuchKey entries mean "already gone": not a failure.
	e.proxy.SetHook(s3srv.PartialDelete(func(key string) *s3server.KeyFailure {
		if strings.HasSuffix(key, "/missing") {
			return &s3server.KeyFailure{Code: "NoSuchKey", Message: "The specified key does not exist."}
		}
		return nil
	}))
	require.NoError(t, e.store.Delete(ctx, []string{"k/03", "k/missing"}))
	require.False(t, e.exists(t, "k/03"))

	e.proxy.SetHook(nil)
	require.NoError(t, e.store.Delete(ctx, keys), "the retry completes")
	left, _ = e.list(t, "k/")
	require.Empty(t, left)
}

// TestConnectionCutMidListing cuts the connection in the middle of a
// listing page's body: the page is asked again and the listing is complete;
// cut on every attempt, the listing fails. It is never reported complete with
// keys missing.
func TestConnectionCutMidListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *s3store.Config) { c.ListPageSize = 100; c.MaxAttempts = 3 })
	ctx := t.Context()
	var keys []string
	for i := range 250 {
		keys = append(keys, fmt.Sprintf("c/%04d", i))
	}
	e.put(t, keys...)

	for _, page := range []int64{1, 2, 3} {
		var lists atomic.Int64
		e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			if s3server.IsListObjectsV2(r) && lists.Add(1) == page {
				testserver.CutMidBody(w, r, forward, 0.5)
				return
			}
			forward.ServeHTTP(w, r)
		})
		got, _ := e.list(t, "c/")
		require.Equal(t, keys, got, "cut on page %d", page)
		require.Equal(t, int64(4), lists.Load(), "3 pages, one of them asked twice")
	}

	// Cut on every attempt of the second page: the listing fails after the
	// first page's keys.
	var attempts atomic.Int64
	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if s3server.IsListObjectsV2(r) && r.URL.Query().Get("continuation-token") != "" {
			attempts.Add(1)
			testserver.CutMidBody(w, r, forward, 0.5)
			return
		}
		forward.ServeHTTP(w, r)
	})
	var got []string
	err := e.store.List(ctx, "c/", func(key string, _ int64) error { got = append(got, key); return nil })
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, keys[:100], got)
	require.Equal(t, int64(3), attempts.Load())
	errtexttest.RequireLine(t, err)

	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		testserver.CutMidBody(w, r, forward, 0.5)
	})
	_, err = e.store.Any(ctx, "c/")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "a probe whose answer was cut is no answer")
}

var (
	contentsRE  = regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)
	nextTokenRE = regexp.MustCompile(`<NextContinuationToken>[^<]*</NextContinuationToken>`)
)

// rewriteList is a hook that passes every ListObjectsV2 answer's body
// through rewrite.
func rewriteList(rewrite func(r *http.Request, body string) string) testserver.Hook {
	return func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if !s3server.IsListObjectsV2(r) {
			forward.ServeHTTP(w, r)
			return
		}
		rec := testserver.Recorded(r, forward)
		testserver.WriteRecorded(w, rec, []byte(rewrite(r, rec.Body.String())))
	}
}

// lastPage reports whether body is a listing's last page.
func lastPage(body string) bool { return strings.Contains(body, "<IsTruncated>false</IsTruncated>") }

// TestInconsistentListingFailsClosed serves listings the store must not
// trust: keys going backwards, a key outside the prefix, a truncated page
// without a continuation token, a token that repeats.
func TestInconsistentListingFailsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *s3store.Config) { c.ListPageSize = 3 })
	keys := []string{"i/1", "i/2", "i/3", "i/4", "i/5"}
	e.put(t, keys...)
	type rewrite struct {
		body func(r *http.Request, body string) string
		want string // in the error
	}
	cases := map[string]rewrite{
		"backwards within a page": {want: `does not follow`, body: func(_ *http.Request, body string) string {
			m := contentsRE.FindAllStringIndex(body, 2)
			if len(m) < 2 {
				return body
			}
			first, second := body[m[0][0]:m[0][1]], body[m[1][0]:m[1][1]]
			return body[:m[0][0]] + second + body[m[0][1]:m[1][0]] + first + body[m[1][1]:]
		}},
		"backwards across pages": {want: `/i/0" does not follow`, body: func(_ *http.Request, body string) string {
			if !lastPage(body) {
				return body
			}
			return strings.Replace(body, "i/4</Key>", "i/0</Key>", 1) // starts before the first page ended
		}},
		"outside the prefix": {want: `is outside the prefix`, body: func(_ *http.Request, body string) string {
			return strings.Replace(body, "i/2</Key>", "j/2</Key>", 1)
		}},
		"truncated without a token": {want: `truncated page has no continuation token`, body: func(_ *http.Request, body string) string {
			return nextTokenRE.ReplaceAllString(body, "")
		}},
		"repeated token": {want: `continuation token repeats`, body: func(r *http.Request, body string) string {
			token := r.URL.Query().Get("continuation-token")
			if token == "" || !lastPage(body) {
				return body
			}
			var escaped strings.Builder
			_ = xml.EscapeText(&escaped, []byte(token))
			return strings.Replace(body, "<IsTruncated>false</IsTruncated>",
				"<IsTruncated>true</IsTruncated><NextContinuationToken>"+escaped.String()+"</NextContinuationToken>", 1)
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e.proxy.SetHook(rewriteList(c.body))
			defer e.proxy.SetHook(nil)
			var got []string
			err := e.store.List(t.Context(), "i/", func(key string, _ int64) error { got = append(got, key); return nil })
			require.ErrorIs(t, err, s3store.ErrInconsistentListing)
			require.Contains(t, err.Error(), c.want)
			require.Subset(t, keys, got, "only real keys, each once")
			require.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), len(got))
			errtexttest.RequireLine(t, err)
		})
	}
	// Untouched, the same listing is fine.
	got, _ := e.list(t, "i/")
	require.Equal(t, keys, got)

	e.proxy.SetHook(rewriteList(func(_ *http.Request, body string) string {
		return strings.Replace(body, "i/1</Key>", "j/1</Key>", 1)
	}))
	_, err := e.store.Any(t.Context(), "i/")
	require.ErrorIs(t, err, s3store.ErrInconsistentListing)
}

// TestContentMD5 checks the DeleteObjects checksums: the SDK's CRC32 always,
// and a Content-MD5 of the body when ContentMD5 is set.
func TestContentMD5(t *testing.T) {
	t.Parallel()
	for _, withMD5 := range []bool{false, true} {
		t.Run(fmt.Sprint("ContentMD5=", withMD5), func(t *testing.T) {
			e := newEnv(t, func(c *s3store.Config) { c.ContentMD5 = withMD5 })
			e.put(t, "m/1", "m/2")
			var mu sync.Mutex
			var header, crc, sum string
			e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if s3server.IsDeleteObjects(r) {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(strings.NewReader(string(body)))
					digest := md5.Sum(body)
					mu.Lock()
					header, crc = r.Header.Get("Content-MD5"), r.Header.Get("X-Amz-Checksum-Crc32")
					sum = base64.StdEncoding.EncodeToString(digest[:])
					mu.Unlock()
				}
				forward.ServeHTTP(w, r)
			})
			require.NoError(t, e.store.Delete(t.Context(), []string{"m/1", "m/2"}))
			require.False(t, e.exists(t, "m/1"))
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, crc)
			if withMD5 {
				require.Equal(t, sum, header)
			} else {
				require.Empty(t, header)
			}
		})
	}
}

// TestLongServerMessagesAreBounded has the server answer with a 100 KB
// message: the error is one line of bounded length that still names the
// call and the code.
func TestLongServerMessagesAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *s3store.Config) { c.MaxAttempts = 1 })
	e.proxy.SetHook(func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		s3server.WriteError(w, r, http.StatusForbidden, "AccessDenied", strings.Repeat("very long\nmessage ", 6000))
	})
	_, err := e.store.Any(t.Context(), "x/")
	var api smithy.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, "AccessDenied", api.ErrorCode())
	require.Contains(t, err.Error(), "s3store: probe s3://"+e.cfg.Bucket+"/"+e.cfg.Root+"x/")
	errtexttest.RequireLine(t, err)
	err = e.store.Delete(t.Context(), []string{"x/1"})
	require.ErrorAs(t, err, &api)
	errtexttest.RequireLine(t, err)
}
