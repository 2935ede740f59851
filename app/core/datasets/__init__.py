"""Building datasets from captured sessions: conversion, filters, near-duplicates, windows, splits, replay, checks."""
