package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The sandbox's /tmp lists the host's /tmp and binds each entry in; other
// processes create and remove entries there all the time (a container
// story failed in CI, 3 in 40 with /tmp churning). An entry that vanishes,
// or is replaced by another kind, between the listing and its bind is not
// mirrored, and the mirror goes on.
//
// The mirror runs on one OS thread with a private mount namespace of its
// own (unshare(CLONE_NEWNS) on a locked thread that is never unlocked, so
// it ends with the goroutine), while other goroutines churn /tmp.
func TestMirrorToleratesEntriesThatVanish(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a private mount namespace of one thread; run the tests as root, as CI does")
	}
	base := t.TempDir()
	own := strings.Split(strings.TrimPrefix(base, "/tmp/"), "/")[0]

	prefix := fmt.Sprintf("infera-mirror-churn-%d-", os.Getpid())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for round := 0; ; round++ {
				var made []string
				for i := 0; i < 40; i++ {
					select {
					case <-stop:
						for _, p := range made {
							os.RemoveAll(p)
						}
						return
					default:
					}
					p := filepath.Join("/tmp", fmt.Sprintf("%s%d-%d", prefix, g, i))
					switch (round + i) % 3 { // a name comes back as another kind
					case 0:
						os.Mkdir(p, 0o755)
					case 1:
						os.WriteFile(p, nil, 0o644)
					case 2:
						os.Symlink("/nonexistent", p)
					}
					made = append(made, p)
				}
				for _, p := range made {
					os.RemoveAll(p)
				}
			}
		}(g)
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})

	const rounds = 20
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread and its namespace end here
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			skip := func(name string) bool { return name == own }
			for i := 0; i < rounds; i++ {
				dir := filepath.Join(base, fmt.Sprint(i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=1777"); err != nil {
					return err
				}
				var mounts []string
				if err := mirror("/tmp", dir, skip, true, &mounts); err != nil {
					return fmt.Errorf("round %d of %d: %w", i+1, rounds, err)
				}
				if len(mounts) == 0 {
					return fmt.Errorf("round %d: nothing mirrored", i+1)
				}
				if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
