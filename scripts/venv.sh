# Sourced by scripts that need a Python virtual environment (setup, build-wheel,
# test-python): `make_venv DIR [PIP ARGUMENTS...]` creates DIR when it is missing or
# broken (installing Debian's python3-venv when venv cannot bootstrap pip) and installs
# what the arguments name.
make_venv() {
  local dir="$1"
  shift
  if [ ! -x "$dir/bin/pip" ]; then
    rm -rf "$dir"
    if ! python3 -m venv "$dir" 2>/dev/null; then
      # Debian and Ubuntu ship venv's pip bootstrap separately.
      rm -rf "$dir"
      local sudo=""
      if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$dir"
    fi
  fi
  if [ $# -gt 0 ]; then
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}
