#!/bin/sh
# a program of the working directory that calls one that does not exist
echo "starting"
no-such-program --flag
