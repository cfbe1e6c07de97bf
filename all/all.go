// Package all registers every distlock backend with distlock.Open. Import
// it for its side effect when the backend is chosen by configuration:
//
//	import _ "github.com/distlock/distlock/all"
package all

import (
	_ "github.com/distlock/distlock/etcd"      // etcd://
	_ "github.com/distlock/distlock/memory"    // mem://
	_ "github.com/distlock/distlock/postgres"  // postgres://, postgresql://
	_ "github.com/distlock/distlock/redis"     // redis://, rediss://
	_ "github.com/distlock/distlock/redlock"   // redlock://
	_ "github.com/distlock/distlock/zookeeper" // zk://
)
