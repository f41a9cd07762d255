// Command oci-registry serves an in-memory OCI distribution registry (go-containerregistry's) on one address
// only, for pko's tests of Flux OCIRepository sources: the module's own cmd/registry listens on every interface.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "the address to listen on")
	flag.Parse()
	server := &http.Server{Addr: *addr, Handler: registry.New(), ReadHeaderTimeout: 30 * time.Second}
	log.Printf("serving on %s", *addr)
	log.Fatal(server.ListenAndServe())
}
