package main

import (
	"context"
	"errors"
)

func cmdVerify(ctx context.Context, env *cliEnv, args []string) error {
	return errors.New("verify is being built")
}
