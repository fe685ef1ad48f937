#!/usr/bin/env bash
# state_owner.sh STATE_DIR — the state sub-folders veri's services write, made and given to their
# uid:gid (compose.yaml's x-least, its one declaration), private (0700). up.sh runs it on every start.
#   spans/    the proxy's span store
#   jobs/     the trainer's job folders (the policy and the console read them)
#   outputs/  the sandboxes' output folders (the launcher hands each one over and back)
# spans/ and jobs/ are given back whole where something else owns a part (a state folder from before
# the services ran as this uid, a file root put there); outputs/ only itself: a running sandbox's
# folder is the sandbox user's (uid 1000) until the launcher takes it back.
set -euo pipefail
state=${1:?usage: state_owner.sh STATE_DIR}
here=$(cd "$(dirname "$0")/../.." && pwd)
owner=$(sed -n '/^x-least:/,/^[^ ]/s/^  user: "\([0-9]*:[0-9]*\)".*/\1/p' "$here/compose.yaml")
if [ -z "$owner" ]; then
  echo "make up: no 'user: \"UID:GID\"' under x-least in $here/compose.yaml: put the services' uid:gid back there" >&2
  exit 1
fi
uid=${owner%:*} gid=${owner#*:}
if account=$(getent passwd "$uid"); then
  echo "make up: warning: the host account '${account%%:*}' has uid $uid, which veri's services run as:" \
    "it can signal them and read their folders; give that account another uid" >&2
fi
fix="run make up as root, or give them to it: sudo chown -R $owner"
for folder in spans jobs outputs; do
  mkdir -p "$state/$folder"
  if [ "$folder" = outputs ]; then
    chown "$owner" "$state/$folder" || { echo "make up: cannot give $state/$folder to uid:gid $owner: $fix $state/$folder" >&2; exit 1; }
  elif ! find "$state/$folder" \( ! -user "$uid" -o ! -group "$gid" \) -exec chown -h "$owner" {} + ; then
    echo "make up: cannot give $state/$folder to uid:gid $owner (compose.yaml's x-least): $fix $state/$folder" >&2
    exit 1
  fi
  chmod 700 "$state/$folder"
done
