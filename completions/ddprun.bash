# bash completion for ddprun and ddprun-rendezvous (installed as share/bash-completion/completions/ddprun and,
# the same file, .../ddprun-rendezvous: bash-completion finds a completion by the command's name).
#
# The options come from `ddprun --help` itself, read once per shell and per ddprun binary, so an option
# added to ddprun needs no edit here, and torchrun's spellings (--nproc_per_node) come along. What an
# option's value is comes from the value name --help prints after it: DIR completes directories,
# FILE and PATH complete files, a few options have a fixed set of words, and N, SEC, HOST:PORT... complete
# nothing (there is nothing to guess). From the first word that is not an option or an option's value on,
# the words belong to the program (completed as files).

# Fills _ddprun_opts ("--name" per entry) and _ddprun_values ("--name=VALUENAME" for options taking one)
# from `$1 --help`.
_ddprun_read_help() {
  local exe=$1 line names value name
  [[ ${_ddprun_help_of-} == "$exe" ]] && return 0
  _ddprun_opts=() _ddprun_values=()
  while IFS= read -r line; do
    # "  -r,--redirects SPEC      Send ..." / "  --standalone     Single-node ...": names, one space, a
    # value name (a flag has none: its description follows after two or more spaces).
    # (ddprun-rendezvous, CLI11's default formatter, may add " REQUIRED" after the value name.)
    [[ $line =~ ^\ +(-[^\ ]+)(\ ([^\ ]+))?(\ REQUIRED)?(\ \ |$) ]] || continue
    names=${BASH_REMATCH[1]} value=${BASH_REMATCH[3]}
    local IFS=,
    for name in $names; do
      _ddprun_opts+=("$name")
      [[ -n $value ]] && _ddprun_values+=("$name=$value")
    done
    unset IFS
  done < <("$exe" --help 2>/dev/null)
  _ddprun_help_of=$exe
}

# The value name of option $1, or failure when it is a flag (or unknown). Like ddprun, it accepts an
# argparse-style prefix (--nproc for --nproc-per-node).
_ddprun_value_name() {
  local entry name=$1
  if [[ $name == --?* && " ${_ddprun_opts[*]} " != *" $name "* ]]; then
    for entry in "${_ddprun_opts[@]}"; do
      [[ $entry == "$name"* ]] && { name=$entry; break; }
    done
  fi
  for entry in "${_ddprun_values[@]}"; do
    [[ ${entry%%=*} == "$name" ]] && { printf '%s' "${entry#*=}"; return 0; }
  done
  return 1
}

# Completes the value of option $1 from word $2.
_ddprun_complete_value() {
  local option=$1 cur=$2 kind words=
  kind=$(_ddprun_value_name "$option")
  case $option in
    --nproc|--nproc-per-node|--nproc_per_node) words="auto gpu cpu" ;;
    --log-level) words="debug info warning error off" ;;
    --rdzv-backend|--rdzv_backend) words="c10d static" ;;
    --start-method|--start_method) words="spawn fork forkserver" ;;
    --local-rank-arg|--local_rank_arg) words="dash underscore none" ;;
    -r|--redirects|-t|--tee) words="0 1 2 3" ;;
  esac
  if [[ -n $words ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
    return
  fi
  case $kind in
    DIR) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); compopt -o filenames 2>/dev/null ;;
    # TEXT is what CLI11 prints for a value nobody named: files, as bash would offer without us.
    FILE|PATH|TEXT) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2>/dev/null ;;
    *) COMPREPLY=() ;;
  esac
}

_ddprun() {
  local cur=${COMP_WORDS[COMP_CWORD]} exe=${COMP_WORDS[0]} i word option
  COMPREPLY=()
  # Run the ddprun being completed (./build/launcher/ddprun or the one on PATH).
  [[ $exe == */* ]] || exe=$(type -P "$exe" 2>/dev/null)
  [[ -n $exe && -x $exe ]] || return 0
  _ddprun_read_help "$exe"

  # Walk the words before the cursor: options, their values, then the program.
  i=1
  while ((i < COMP_CWORD)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then
      mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2>/dev/null
      return 0
    elif [[ $word == -* ]]; then
      # --opt VALUE takes the next word; --opt=VALUE is split by bash into "--opt" "=" "VALUE".
      if [[ ${COMP_WORDS[i + 1]-} == = ]]; then
        if ((i + 2 >= COMP_CWORD)); then  # the cursor is on the "=" or on the value after it
          ((i + 2 == COMP_CWORD)) && _ddprun_complete_value "$word" "$cur" || _ddprun_complete_value "$word" ""
          return 0
        fi
        ((i += 3))
        continue
      fi
      if _ddprun_value_name "$word" >/dev/null; then
        ((i + 1 == COMP_CWORD)) && { _ddprun_complete_value "$word" "$cur"; return 0; }
        ((i += 2))
        continue
      fi
      ((i += 1))
    else
      # The program has begun: its own arguments are files as far as we know.
      mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2>/dev/null
      return 0
    fi
  done

  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_ddprun_opts[*]}" -- "$cur")
  else
    # The program: a script or an executable.
    mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2>/dev/null
  fi
  return 0
}
complete -F _ddprun ddprun ddprun-launch ddprun-rendezvous ddprun-status
