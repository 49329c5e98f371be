// h3idle opens N HTTP/3 connections (quic-go, each on its own UDP socket), sends one GET on
// each, reads the response, and holds them open until stdin closes. Prints "ready N" once all
// are established. bench/h3.sh uses it to measure a server's memory per idle HTTP/3
// connection (as bench/tools/idle_conns.py does for TCP). Certificates are not verified.
// Usage: h3idle PORT N PATH
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: h3idle PORT N PATH")
		os.Exit(2)
	}
	port, n, path := os.Args[1], atoi(os.Args[2]), os.Args[3]
	url := "https://localhost:" + port + path
	var held []*http.Client
	for i := 0; i < n; i++ {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}},
			// Longer than any server's idle timeout under test: the server decides.
			QUICConfig: &quic.Config{MaxIdleTimeout: 10 * time.Minute, KeepAlivePeriod: 0},
		}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
		resp, err := c.Do(req)
		if err != nil {
			fmt.Fprintf(os.Stderr, "connection %d: %v\n", i, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held = append(held, c)
	}
	fmt.Printf("ready %d\n", len(held))
	io.Copy(io.Discard, os.Stdin)
}

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "not a number:", s)
		os.Exit(2)
	}
	return v
}
