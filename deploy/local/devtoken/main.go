// Command devtoken prints an HS256 JWT for the local stack, so the README's
// curl example can call the signer as an authenticated user.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func main() {
	if err := run(os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devtoken:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	secret := fs.String("secret", "", "the signer's MINTGATE_JWT_HS256_SECRET")
	tenant := fs.String("tenant", "acme", "the tenant_id claim")
	sub := fs.String("sub", "alice", "the user (sub claim)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	aud := fs.String("aud", "", "the aud claim: the signer's MINTGATE_JWT_AUDIENCE")
	iss := fs.String("iss", "", "the iss claim: the signer's MINTGATE_JWT_ISSUER")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *secret == "" {
		return fmt.Errorf("-secret is required")
	}
	now := time.Now()
	claims := jwt.MapClaims{
		"sub": *sub, "tenant_id": *tenant,
		"iat": now.Unix(), "exp": now.Add(*ttl).Unix(),
	}
	// A signer with an audience or issuer refuses a token without them.
	if *aud != "" {
		claims["aud"] = *aud
	}
	if *iss != "" {
		claims["iss"] = *iss
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(*secret))
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
