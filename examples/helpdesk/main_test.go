package helpdesk_test

import (
	"os"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

// The S3 and Redis the tests talk to. A service's CI brings its own (a
// MinIO or Redis container, named by its environment); this module's test
// servers stand in: TEST_S3_ENDPOINT or versitygw, TEST_REDIS_URL or
// redis-server.
var (
	s3srv    *s3server.Server
	redisSrv *redisserver.Server
)

func TestMain(m *testing.M) {
	var stopS3, stopRedis func()
	s3srv, stopS3 = s3server.StartForTests()
	redisSrv, stopRedis = redisserver.StartForTests()
	code := m.Run()
	stopRedis()
	stopS3()
	os.Exit(code)
}
