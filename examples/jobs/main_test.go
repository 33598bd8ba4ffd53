package jobs_test

import (
	"os"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

// The S3 the tests talk to. A service's CI brings its own (a MinIO
// container, named by its environment); this module's test server stands
// in: TEST_S3_ENDPOINT or versitygw.
var s3srv *s3server.Server

func TestMain(m *testing.M) {
	var stop func()
	s3srv, stop = s3server.StartForTests()
	code := m.Run()
	stop()
	os.Exit(code)
}
