package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/infera/infera-exec/tools/ociimage"
)

var imageCommand = subcommand{
	name:     "image",
	summary:  "pack a payload into the overlay image: an OCI layout and a docker-archive",
	synopsis: "[-payload DIR] [-oci DIR] [-archive FILE] [-layer FILE] [-busybox FILE -busybox-copyright FILE] [-version V] [-revision R] [-arch ARCH] [-q]",
	about: `
Builds the overlay image without a Docker daemon: FROM scratch, one layer
that is the payload, ENTRYPOINT ["/bin/infera-exec", "--install"],
CMD ["/overlay"], PATH=/bin:/usr/bin. Writes it as an OCI image layout
(-oci, tagged -tag) and as a docker-archive tarball (-archive, named
-name) with the same config and layer blobs, and prints the image's
digest.

The v0.2.2 image's contract stays: the layer holds the payload again at
/payload (hard links: its bytes once) and, with -busybox, a static
busybox (Debian's busybox-static) as /usr/bin/sh and /usr/bin/cp, with
its copyright file, so an init container written for v0.2.2,
["sh", "-c", "cp -a /payload/. /overlay/"], fills the volume as
--install does. make overlay-image passes Debian's.

The payload is checked against its index first, and bin/infera-exec must
be a static executable for -arch. The build is reproducible: every
timestamp is SOURCE_DATE_EPOCH (default 0, the epoch), so the same
payload gives the same digest. Dockerfile.overlay builds the same files
and configuration with Docker.`,
	examples: []string{
		"infera-payload image -payload build/payload -oci build/overlay-oci -archive build/overlay.tar -busybox /bin/busybox -busybox-copyright /usr/share/doc/busybox-static/copyright -version v0.3.0 -revision $(git rev-parse --short=12 HEAD)",
		"SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) infera-payload image -arch arm64 -archive ''",
		"skopeo copy oci:build/overlay-oci:latest docker://REGISTRY/infera/overlay:OVERLAY_TAG",
	},
	flags: func(fl *flag.FlagSet) action {
		var o ociimage.Options
		o.Flags(fl)
		quiet := quietFlag(fl)
		return func(env []string, stdout, stderr io.Writer) error {
			o.Progress = reporter(*quiet, env, stderr)
			created, err := ociimage.SourceDate(env)
			if err != nil {
				return usageError{err}
			}
			o.Created = created
			r, err := ociimage.Build(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "overlay image %s (config %s, %d entries, %s/%s)\n", r.Digest, r.Config, r.Entries, o.OS, o.Arch)
			if o.OCI != "" {
				fmt.Fprintf(stdout, "  OCI layout      %s  (oci:%s:%s)\n", o.OCI, o.OCI, o.Tag)
			}
			if o.Archive != "" {
				fmt.Fprintf(stdout, "  docker-archive  %s  (%s)\n", o.Archive, o.ArchiveName())
			}
			return nil
		}
	},
}
